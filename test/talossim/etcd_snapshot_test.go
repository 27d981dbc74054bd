package talossim

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"google.golang.org/protobuf/proto"
)

// snapshotStatus is what etcdutl's snapshot status reports, which `talosctl etcd snapshot` prints.
type snapshotStatus struct {
	hash      uint32
	revision  int64
	totalKeys int
	totalSize int64
	version   string
}

// readSnapshotStatus opens a snapshot (database and trailing hash) the way etcdutl v3.6's
// snapshot.v3Manager.Status does and computes the same status, failing the test on an integrity error.
func readSnapshotStatus(t *testing.T, snap []byte) snapshotStatus {
	t.Helper()

	path := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(path, snap, 0o600); err != nil {
		t.Fatal(err)
	}

	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("opening the snapshot: %v", err)
	}

	defer db.Close() //nolint:errcheck // read-only

	var st snapshotStatus

	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	seen := map[string]bool{}

	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("snapshot integrity: %v", err)
		}

		st.totalSize = tx.Size()
		st.version = string(tx.Bucket(snapshotMetaBucket).Get(snapshotStorageVersionKey))

		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			h.Write(name)

			return b.ForEach(func(k, v []byte) error {
				h.Write(k)
				h.Write(v)

				if !bytes.Equal(name, snapshotKeyBucket) {
					return nil
				}

				if len(k) < 17 || k[8] != '_' {
					t.Fatalf("key bucket key %x is not a revision", k)
				}

				st.revision = int64(binary.BigEndian.Uint64(k)) //nolint:gosec // a revision

				var kv mvccpb.KeyValue
				if err := proto.Unmarshal(v, &kv); err != nil {
					t.Fatalf("key bucket value at %x: %v", k, err)
				}

				seen[string(kv.GetKey())] = len(k) != 18 || k[17] != 't' // tombstones delete

				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, live := range seen {
		if live {
			st.totalKeys++
		}
	}

	st.hash = h.Sum32()

	return st
}

// wantSnapshotSize is the documented size of a snapshot asked to be size bytes: the smallest whole
// number of 4 KiB pages (at least the six of the smallest database) plus 32 that is at least size.
func wantSnapshotSize(size int) int {
	if size == 0 {
		size = DefaultSnapshotSize
	}

	pages := 6
	for pages*4096+32 < size {
		pages++
	}

	return pages*4096 + 32
}

func TestSnapshotLayout(t *testing.T) {
	t.Parallel()

	const seed = 0x0123456789abcdef

	// Sizes around the page rounding and the smallest database, each at a revision of the cycle (the
	// revision only moves entries between revisions, so every pairing is not needed).
	sizes := []int{0, 1, 56, 6*4096 + 32, 6*4096 + 33, 300_001, 1<<20 + 33}
	revisions := []int64{1, 42, 1_000_000}

	for i, size := range sizes {
		rev := revisions[i%len(revisions)]

		snap, err := buildSnapshot(seed, rev, size)
		if err != nil {
			t.Fatalf("size %d revision %d: %v", size, rev, err)
		}

		if want := wantSnapshotSize(size); len(snap) != want || len(snap)%512 != 32 {
			t.Fatalf("size %d revision %d: %d bytes, want %d", size, rev, len(snap), want)
		}

		db := snap[:len(snap)-sha256.Size]
		if sum := sha256.Sum256(db); !bytes.Equal(sum[:], snap[len(db):]) {
			t.Fatalf("size %d revision %d: trailing hash is not the database's SHA-256", size, rev)
		}

		// Deterministic: building again, without the cache, gives the same bytes.
		again, err := snapshotParams{seed: seed, revision: rev, size: cmp.Or(size, DefaultSnapshotSize)}.build()
		if err != nil || !bytes.Equal(again, snap) {
			t.Fatalf("size %d revision %d: rebuilt snapshot differs (%v)", size, rev, err)
		}

		st := readSnapshotStatus(t, snap)
		if st.revision != rev || st.totalSize != int64(len(db)) || st.version != "3.6.0" || st.totalKeys < 2 {
			t.Fatalf("size %d revision %d: status %+v", size, rev, st)
		}

		if got, err := parseSnapshotBytes(t, snap, false); err != nil || got != (snapshotData{seed: seed, revision: rev}) {
			t.Fatalf("size %d revision %d: parsed %+v, %v", size, rev, got, err)
		}
	}

	// Seed and revision both show in the bytes.
	a, _ := buildSnapshot(1, 42, 0)
	b, _ := buildSnapshot(2, 42, 0)
	c, _ := buildSnapshot(1, 43, 0)

	if bytes.Equal(a, b) || bytes.Equal(a, c) {
		t.Fatal("snapshots of other data or revisions must differ")
	}
}

// TestSnapshotSchema checks the snapshot against etcd's own schema definitions.
func TestSnapshotSchema(t *testing.T) {
	t.Parallel()

	var names []string
	for _, b := range schema.AllBuckets {
		names = append(names, string(b.Name()))
	}

	var ours []string
	for _, b := range snapshotBuckets {
		ours = append(ours, string(b))
	}

	if !slices.Equal(ours, names) || !bytes.Equal(snapshotKeyBucket, schema.Key.Name()) || !bytes.Equal(snapshotMetaBucket, schema.Meta.Name()) ||
		!bytes.Equal(snapshotConsistentIndexKey, schema.MetaConsistentIndexKeyName) || !bytes.Equal(snapshotTermKey, schema.MetaTermKeyName) ||
		!bytes.Equal(snapshotStorageVersionKey, schema.MetaStorageVersionName) {
		t.Fatalf("buckets %v, want etcd's %v, or a meta key name differs", ours, names)
	}

	snap, err := buildSnapshot(7, 1234, 100_000)
	if err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "db")
	if err = os.WriteFile(path, snap[:len(snap)-sha256.Size], 0o600); err != nil {
		t.Fatal(err)
	}

	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}

	defer db.Close() //nolint:errcheck // read-only

	err = db.View(func(tx *bolt.Tx) error {
		if v := schema.ReadStorageVersionFromSnapshot(tx); v == nil || v.String() != etcdStorageVersion {
			t.Errorf("storage version = %v", v)
		}

		meta := tx.Bucket(schema.Meta.Name())
		if ci, term := meta.Get(schema.MetaConsistentIndexKeyName), meta.Get(schema.MetaTermKeyName); len(ci) != 8 || len(term) != 8 ||
			binary.BigEndian.Uint64(ci) != bootstrapRaftIndex+1234 || binary.BigEndian.Uint64(term) != bootstrapRaftTerm {
			t.Errorf("consistent index %x, term %x", ci, term)
		}

		// Revisions increase through the key bucket, each value a KeyValue created at its revision.
		var prev []byte

		return tx.Bucket(schema.Key.Name()).ForEach(func(k, v []byte) error {
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return err
			}

			if len(k) != 17 || k[8] != '_' || bytes.Compare(prev, k) >= 0 || kv.GetModRevision() != int64(binary.BigEndian.Uint64(k)) || //nolint:gosec // a revision
				kv.GetCreateRevision() != kv.GetModRevision() || kv.GetVersion() != 1 {
				t.Fatalf("entry %x = %v after %x", k, &kv, prev)
			}

			prev = k

			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestParseSnapshotRefuses(t *testing.T) {
	t.Parallel()

	good, err := buildSnapshot(9, 5, 1)
	if err != nil {
		t.Fatal(err)
	}

	badHash := bytes.Clone(good)
	badHash[len(badHash)-1] ^= 1

	withHash := func(db []byte) []byte {
		sum := sha256.Sum256(db)

		return append(db, sum[:]...)
	}

	// A bbolt database with etcd's buckets but data of its own.
	path := filepath.Join(t.TempDir(), "foreign")

	db, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: snapshotPageSize})
	if err != nil {
		t.Fatal(err)
	}

	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range snapshotBuckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}

		return putRevision(tx.Bucket(snapshotKeyBucket), 2, 0, []byte("/registry/foo"), []byte("bar"))
	})
	if err != nil {
		t.Fatal(err)
	}

	var foreign bytes.Buffer
	if err = db.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&foreign); return err }); err != nil {
		t.Fatal(err)
	}

	if err = db.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		in   []byte
		skip bool
		want string
	}{
		{"no hash", []byte("not a snapshot"), false, "snapshot missing hash but --skip-hash-check=false"},
		{"tiny", []byte("not a snapshot"), true, "snapshot is not an etcd snapshot: 14 bytes"},
		{"bad hash", badHash, false, "snapshot file integrity check failed"},
		{"not bbolt", withHash(bytes.Repeat([]byte("talossim"), 3*snapshotPageSize/8)), false, "snapshot is not an etcd snapshot: invalid database"},
	} {
		if _, err := parseSnapshotBytes(t, tc.in, tc.skip); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}

	// A real etcd's snapshot (no seed entry) is foreign: restored as it is, at its last revision.
	if got, err := parseSnapshotBytes(t, withHash(foreign.Bytes()), false); err != nil || got != (snapshotData{revision: 2, foreign: true}) {
		t.Errorf("foreign snapshot: %+v, %v", got, err)
	}

	// Skipping the hash check accepts a wrong hash, and a bare database.
	for _, in := range [][]byte{badHash, good[:len(good)-sha256.Size]} {
		if got, err := parseSnapshotBytes(t, in, true); err != nil || got.seed != 9 || got.revision != 5 {
			t.Errorf("skip-hash-check on %d bytes: %+v, %v", len(in), got, err)
		}
	}
}

// BenchmarkBuildSnapshot measures building a default-size (1 MiB) snapshot, bypassing the cache.
func BenchmarkBuildSnapshot(b *testing.B) {
	for i := range b.N {
		if _, err := (snapshotParams{seed: 1, revision: int64(i + 1), size: DefaultSnapshotSize}).build(); err != nil {
			b.Fatal(err)
		}
	}

	b.SetBytes(DefaultSnapshotSize)
}

// BenchmarkParseSnapshot measures reading seed and revision back from a default-size snapshot.
func BenchmarkParseSnapshot(b *testing.B) {
	snap, err := buildSnapshot(1, 1000, 0)
	if err != nil {
		b.Fatal(err)
	}

	b.SetBytes(int64(len(snap)))

	for range b.N {
		if _, err := parseSnapshotBytes(b, snap, false); err != nil {
			b.Fatal(err)
		}
	}
}

// parseSnapshotBytes is parseSnapshotFile on b, written to a file as EtcdRecover writes an upload.
func parseSnapshotBytes(tb testing.TB, b []byte, skipHashCheck bool) (snapshotData, error) {
	tb.Helper()

	path := filepath.Join(tb.TempDir(), "upload.snapshot")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}

	return parseSnapshotFile(path, skipHashCheck)
}
