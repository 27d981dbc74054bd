package talossim

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// snapshotMagic starts every simulated snapshot; real ones are bbolt files, which clients treat as opaque.
var snapshotMagic = [8]byte{'T', 'S', 'I', 'M', 'E', 'T', 'C', 'D'}

// snapshotHeaderSize is magic + data seed + revision.
const snapshotHeaderSize = len(snapshotMagic) + 8 + 8

// buildSnapshot lays out a snapshot of exactly size bytes (at least header + hash): the header, a
// ChaCha8 stream seeded from it, and the SHA-256 of everything before, which etcd appends to snapshots
// and checks on restore.
func buildSnapshot(seed uint64, revision int64, size int) []byte {
	if size == 0 {
		size = DefaultSnapshotSize
	}

	size = max(size, snapshotHeaderSize+sha256.Size)
	buf := make([]byte, size)

	copy(buf, snapshotMagic[:])
	binary.BigEndian.PutUint64(buf[len(snapshotMagic):], seed)
	binary.BigEndian.PutUint64(buf[len(snapshotMagic)+8:], uint64(revision))

	body := buf[snapshotHeaderSize : size-sha256.Size]
	_, _ = rand.NewChaCha8(sha256.Sum256(buf[:snapshotHeaderSize])).Read(body) //nolint:errcheck // never fails

	sum := sha256.Sum256(buf[:size-sha256.Size])
	copy(buf[size-sha256.Size:], sum[:])

	return buf
}

// parseSnapshot reads the data seed and revision of an uploaded snapshot, verifying the trailing hash
// unless skipHashCheck (like etcd's restore with --skip-hash-check).
func parseSnapshot(b []byte, skipHashCheck bool) (seed uint64, revision int64, err error) {
	if len(b) < snapshotHeaderSize+sha256.Size || [8]byte(b[:len(snapshotMagic)]) != snapshotMagic {
		return 0, 0, fmt.Errorf("snapshot is not a talossim etcd snapshot (%d bytes)", len(b))
	}

	if !skipHashCheck {
		want := b[len(b)-sha256.Size:]
		if got := sha256.Sum256(b[:len(b)-sha256.Size]); string(got[:]) != string(want) {
			return 0, 0, fmt.Errorf("snapshot file integrity check failed: expected sha256 %x, got %x", want, got)
		}
	}

	seed = binary.BigEndian.Uint64(b[len(snapshotMagic):])
	revision = int64(binary.BigEndian.Uint64(b[len(snapshotMagic)+8:])) //nolint:gosec // written from an int64

	return seed, revision, nil
}
