package talossim

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// A simulated etcd snapshot is a real etcd v3 backend snapshot, as etcd's Maintenance.Snapshot streams
// it: a bbolt database with etcd's buckets followed by the SHA-256 of the database bytes. The `key`
// bucket holds the data, keyed by revision: a small entry at revision 1 records the data seed, and
// padding entries derived from the seed, the last one at the cluster's revision, bring the database to
// the requested size. So etcdutl's snapshot status (which `talosctl etcd snapshot` prints) reports the
// cluster's revision, and a restore recovers seed and revision from the data itself.

// Bucket and meta key names as go.etcd.io/etcd/server/v3/storage/schema defines them (TestSnapshotSchema
// checks); that package drags in the whole etcd server, so they are spelled out here.
var (
	snapshotKeyBucket  = []byte("key")
	snapshotMetaBucket = []byte("meta")
	// snapshotBuckets are the buckets etcd creates in every backend (schema.AllBuckets).
	snapshotBuckets = [][]byte{
		snapshotKeyBucket, snapshotMetaBucket, []byte("lease"), []byte("alarm"), []byte("cluster"),
		[]byte("members"), []byte("members_removed"), []byte("auth"), []byte("authUsers"), []byte("authRoles"),
	}
	snapshotConsistentIndexKey = []byte("consistent_index")
	snapshotTermKey            = []byte("term")
	snapshotStorageVersionKey  = []byte("storageVersion")
)

const (
	// snapshotPageSize is bbolt's page size, fixed rather than the OS page size so that snapshots are
	// the same bytes everywhere.
	snapshotPageSize = 4096
	// snapshotFillPercent is what etcd sets on the key bucket for its sequential writes.
	snapshotFillPercent = 0.9
	// snapshotValueSize is the value size of a padding entry: its leaf element is about 1.95 KiB, so two
	// fit a page and a third exceeds the fill percent, and every full leaf page holds two entries.
	snapshotValueSize = 1850
	// snapshotSeedKey is the etcd key whose value (16 hex digits) is the data seed.
	snapshotSeedKey = "/talossim/data-seed"
	// snapshotKeyPrefix starts the etcd keys of the padding entries.
	snapshotKeyPrefix = "/registry/talossim/"
	// snapshotMaxLayouts bounds the database builds that size a snapshot (one or two in practice).
	snapshotMaxLayouts = 8
	// snapshotCacheSize is how many recent snapshots are kept: tests and benchmarks take many snapshots
	// of few cluster states.
	snapshotCacheSize = 8
)

// snapshotParams identifies a snapshot: the same parameters always give the same bytes.
type snapshotParams struct {
	seed     uint64
	revision int64
	size     int
}

// snapshotCache holds the most recently built snapshots, oldest first.
var snapshotCache struct {
	sync.Mutex

	entries []snapshotCacheEntry
}

type snapshotCacheEntry struct {
	params snapshotParams
	snap   []byte
}

// minSnapshotPages is the size in pages of the smallest snapshot database: two meta pages, the two
// pages bbolt initialises a file with (free after the first write), the root page with the inline
// buckets, and one leaf of the key bucket with the seed and one padding entry.
const minSnapshotPages = 6

// snapshotPages returns the database pages needed for a snapshot of at least size bytes.
func snapshotPages(size int) int {
	return max(size-sha256.Size+snapshotPageSize-1, 0) / snapshotPageSize
}

// buildSnapshot returns the snapshot of the data identified by seed at revision: the smallest whole
// number of pages (at least minSnapshotPages) plus the 32-byte hash that is at least size bytes (0 for
// DefaultSnapshotSize). The bytes are shared with the cache, so that a node streaming a large snapshot
// holds it once, as a real node streams from its database without copying it: callers must not
// modify them (appending is safe, the slice's capacity ends at its length).
func buildSnapshot(seed uint64, revision int64, size int) ([]byte, error) {
	if size == 0 {
		size = DefaultSnapshotSize
	}

	p := snapshotParams{seed: seed, revision: max(revision, 1), size: size}

	snapshotCache.Lock()
	defer snapshotCache.Unlock()

	for _, e := range snapshotCache.entries {
		if e.params == p {
			return e.snap[:len(e.snap):len(e.snap)], nil
		}
	}

	snap, err := p.build()
	if err != nil {
		return nil, err
	}

	if len(snapshotCache.entries) == snapshotCacheSize {
		snapshotCache.entries = snapshotCache.entries[1:]
	}

	snapshotCache.entries = append(snapshotCache.entries, snapshotCacheEntry{params: p, snap: snap})

	return snap[:len(snap):len(snap)], nil
}

// build sizes the database: it estimates the padding entries for the target page count, then grows or
// shrinks the last padding value by the pages missing or in excess. The last entry's leaf always has
// room for the few bytes a longer length prefix takes, and its size never moves a split point, so
// every page added to it adds exactly one page to the database.
func (p snapshotParams) build() ([]byte, error) {
	want := max(snapshotPages(p.size), minSnapshotPages)

	l := snapshotLayout{snapshotParams: p, entries: estimateSnapshotEntries(want)}

	for range snapshotMaxLayouts {
		db, err := l.write()
		if err != nil {
			return nil, err
		}

		pages := len(db) / snapshotPageSize

		switch {
		case pages < want:
			l.extra += (want - pages) * snapshotPageSize
		case pages > want && l.extra > 0:
			l.extra = max(l.extra-(pages-want)*snapshotPageSize, 0)
		case pages > want && l.entries > 1:
			l.entries = max(l.entries-2*(pages-want), 1)
		default:
			sum := sha256.Sum256(db)

			return append(db, sum[:]...), nil
		}
	}

	return nil, fmt.Errorf("talossim: no etcd snapshot layout of %d pages found for %+v", want, p)
}

// estimateSnapshotEntries returns the padding entries of a database of about pages pages: the fixed
// pages of the smallest database (whose leaf holds the seed and one entry), one more leaf per two more
// entries, and the branch pages above the leaves: one for up to 123 of them, about one per 111 leaves
// plus a root beyond (at 4 KiB pages and the fill percent, and for databases below about 48 MiB).
func estimateSnapshotEntries(pages int) int {
	leaves := pages - minSnapshotPages + 1

	branches := 0
	if leaves > 123 {
		branches = (leaves+110)/111 + 1
	} else if leaves > 1 {
		branches = 1
	}

	return max(2*(leaves-branches)-1, 1)
}

// snapshotLayout is one candidate database: entries padding entries, the last extra bytes longer.
type snapshotLayout struct {
	snapshotParams

	entries int
	extra   int
}

// write builds the database in a temporary file, with the options etcd opens its backend with, and
// returns its bytes as etcd's snapshot copies them (bbolt's Tx.WriteTo: exactly the pages in use).
// bbolt writes the same pages for the same sequence of updates, and the page size is fixed, so the
// bytes depend only on the layout.
func (l snapshotLayout) write() (_ []byte, err error) {
	f, err := os.CreateTemp("", "talossim-etcd-*.db")
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot: %w", err)
	}

	path := f.Name()
	defer os.Remove(path) //nolint:errcheck // best effort

	if err = f.Close(); err != nil {
		return nil, fmt.Errorf("etcd snapshot: %w", err)
	}

	db, err := bolt.Open(path, 0o600, &bolt.Options{
		PageSize:        snapshotPageSize,
		NoSync:          true,
		NoGrowSync:      true,
		NoFreelistSync:  true,
		FreelistType:    bolt.FreelistArrayType,
		InitialMmapSize: (l.size + l.extra) * 2,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot: %w", err)
	}

	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("etcd snapshot: %w", cerr)
		}
	}()

	if err = db.Update(l.fill); err != nil {
		return nil, fmt.Errorf("etcd snapshot: %w", err)
	}

	var buf bytes.Buffer

	err = db.View(func(tx *bolt.Tx) error {
		buf.Grow(int(tx.Size()) + sha256.Size)
		_, err := tx.WriteTo(&buf)

		return err
	})
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot: %w", err)
	}

	return buf.Bytes(), nil
}

// fill writes etcd's buckets, the meta keys, the seed entry and the padding entries in one transaction.
func (l snapshotLayout) fill(tx *bolt.Tx) error {
	for _, name := range snapshotBuckets {
		if _, err := tx.CreateBucket(name); err != nil {
			return err
		}
	}

	// The raft position is the one a cluster restored from the snapshot starts at, so that the snapshot
	// depends on the data alone (the live cluster's index also counts membership changes).
	meta := tx.Bucket(snapshotMetaBucket)
	for _, kv := range []struct{ k, v []byte }{
		{snapshotConsistentIndexKey, binary.BigEndian.AppendUint64(nil, bootstrapRaftIndex+uint64(l.revision))},
		{snapshotTermKey, binary.BigEndian.AppendUint64(nil, bootstrapRaftTerm)},
		{snapshotStorageVersionKey, []byte(etcdStorageVersion)},
	} {
		if err := meta.Put(kv.k, kv.v); err != nil {
			return err
		}
	}

	keys := tx.Bucket(snapshotKeyBucket)
	keys.FillPercent = snapshotFillPercent

	seedValue := fmt.Appendf(nil, "%016x", l.seed)
	if err := putRevision(keys, 1, 0, []byte(snapshotSeedKey), seedValue); err != nil {
		return err
	}

	// Padding entry i (1..entries) is at main revision ceil(i*revision/entries), so the last one is at
	// the revision; entries sharing a main revision get increasing sub revisions, after the seed's 1_0.
	var seedBytes [32]byte
	binary.BigEndian.PutUint64(seedBytes[:], l.seed)
	copy(seedBytes[8:], "talossim etcd data")
	values := rand.NewChaCha8(seedBytes)

	rev, entries := uint64(l.revision), uint64(l.entries) //nolint:gosec // both positive
	lastMain, sub := uint64(1), uint64(0)

	for i := uint64(1); i <= entries; i++ {
		main := (i*rev + entries - 1) / entries
		if main == lastMain {
			sub++
		} else {
			lastMain, sub = main, 0
		}

		n := snapshotValueSize
		if i == entries {
			n += l.extra
		}

		value := make([]byte, n)
		_, _ = values.Read(value) //nolint:errcheck // never fails

		if err := putRevision(keys, main, sub, fmt.Appendf(nil, "%s%08x", snapshotKeyPrefix, i), value); err != nil {
			return err
		}
	}

	return nil
}

// putRevision stores key=value, created at main_sub, in the key bucket as etcd's mvcc store does.
func putRevision(b *bolt.Bucket, main, sub uint64, key, value []byte) error {
	kv, err := proto.MarshalOptions{Deterministic: true}.Marshal(&mvccpb.KeyValue{
		Key:            key,
		CreateRevision: int64(main), //nolint:gosec // a revision
		ModRevision:    int64(main), //nolint:gosec // a revision
		Version:        1,
		Value:          value,
	})
	if err != nil {
		return err
	}

	return b.Put(revisionKey(main, sub), kv)
}

// revisionKey encodes a revision like etcd's mvcc.RevToBytes: main, '_', sub, big-endian.
func revisionKey(main, sub uint64) []byte {
	k := make([]byte, 17)
	binary.BigEndian.PutUint64(k, main)
	k[8] = '_'
	binary.BigEndian.PutUint64(k[9:], sub)

	return k
}

// snapshotData is what a restore reads from an uploaded snapshot.
type snapshotData struct {
	// seed identifies a talossim cluster's data; 0 when foreign.
	seed uint64
	// revision is the last revision in the key bucket, as etcd's status reports it.
	revision int64
	// foreign is set for a snapshot of a real etcd (the Kubernetes control plane's) rather than one
	// generated by the simulator.
	foreign bool
}

// parseSnapshotFile reads an uploaded snapshot like etcd's restore: a size with size%512 == 32 means a
// trailing SHA-256, verified unless skipHashCheck (--skip-hash-check), which also accepts a bare
// database. The database is checked page by page (a corrupt page could otherwise crash the reader).
func parseSnapshotFile(path string, skipHashCheck bool) (snapshotData, error) {
	f, err := os.Open(path)
	if err != nil {
		return snapshotData{}, err
	}

	defer f.Close() //nolint:errcheck // read-only

	fi, err := f.Stat()
	if err != nil {
		return snapshotData{}, err
	}

	size := fi.Size()
	dbSize := size

	switch hasHash := size%512 == sha256.Size; {
	case hasHash:
		dbSize = size - sha256.Size
	case !skipHashCheck:
		return snapshotData{}, fmt.Errorf("snapshot missing hash but --skip-hash-check=false (%d bytes)", size)
	}

	// bbolt would initialise an empty file rather than refuse it.
	if dbSize < 2*snapshotPageSize {
		return snapshotData{}, fmt.Errorf("snapshot is not an etcd snapshot: %d bytes", size)
	}

	// The database is copied without its hash, as etcd's restore copies it, hashing on the way.
	db, err := os.CreateTemp("", "talossim-etcd-*.db")
	if err != nil {
		return snapshotData{}, err
	}

	defer os.Remove(db.Name()) //nolint:errcheck // best effort

	h := sha256.New()

	_, err = io.CopyN(io.MultiWriter(db, h), f, dbSize)
	if cerr := db.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		return snapshotData{}, err
	}

	if dbSize != size && !skipHashCheck {
		want := make([]byte, sha256.Size)
		if _, err = io.ReadFull(f, want); err != nil {
			return snapshotData{}, err
		}

		if got := h.Sum(nil); !bytes.Equal(got, want) {
			return snapshotData{}, fmt.Errorf("snapshot file integrity check failed: expected sha256 %x, got %x", want, got)
		}
	}

	return readSnapshotDB(db.Name())
}

// readSnapshotDB opens a snapshot database file, checks its structure, and reads the seed entry (if
// the simulator generated it) and the last revision.
func readSnapshotDB(path string) (data snapshotData, err error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		return data, fmt.Errorf("snapshot is not an etcd snapshot: %w", err)
	}

	defer db.Close() //nolint:errcheck // read-only

	err = db.View(func(tx *bolt.Tx) error {
		if err := errors.Join(collect(tx.Check())...); err != nil {
			return fmt.Errorf("snapshot database is corrupt: %w", err)
		}

		keys := tx.Bucket(snapshotKeyBucket)
		if keys == nil || tx.Bucket(snapshotMetaBucket) == nil {
			return errors.New("snapshot is not an etcd snapshot: no key and meta buckets")
		}

		c := keys.Cursor()

		first, v := c.First()
		if first == nil {
			return errors.New("snapshot is not an etcd snapshot: its key bucket is empty")
		}

		if data.seed, data.foreign, err = snapshotSeed(first, v); err != nil {
			return err
		}

		last, _ := c.Last()
		data.revision = int64(binary.BigEndian.Uint64(last[:8])) //nolint:gosec // written from an int64

		return nil
	})

	return data, err
}

// snapshotSeed decodes the seed entry, the first in the key bucket of a talossim snapshot; foreign is
// set when the first entry is another key, as in a real etcd's snapshot.
func snapshotSeed(k, v []byte) (seed uint64, foreign bool, err error) {
	var kv mvccpb.KeyValue

	if len(k) != 17 || proto.Unmarshal(v, &kv) != nil {
		return 0, false, errors.New("snapshot is not an etcd snapshot: its first key is not an etcd revision")
	}

	if string(kv.GetKey()) != snapshotSeedKey {
		return 0, true, nil
	}

	seed, err = strconv.ParseUint(string(kv.GetValue()), 16, 64)
	if err != nil {
		return 0, false, fmt.Errorf("etcd snapshot has a bad data seed: %w", err)
	}

	return seed, false, nil
}

// collect drains an error channel.
func collect(ch <-chan error) []error {
	var errs []error
	for err := range ch {
		errs = append(errs, err)
	}

	return errs
}
