// Package snapshot reads from an etcd snapshot file what a restore
// confirms afterwards: the revision the snapshot was taken at, and the
// revision a key was last written at, which kube-apiserver then reports as
// that object's resourceVersion.
package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// keyBucket is etcd's bucket of key revisions (go.etcd.io/etcd/server/v3
// storage/schema.Key): keys are a revision, 8 bytes main and 8 bytes sub
// joined by '_', plus a trailing 't' for a deletion; values are
// mvccpb.KeyValue.
var keyBucket = []byte("key")

const (
	revisionKeyLen  = 17
	tombstoneKeyLen = 18
)

// Info is what Read found.
type Info struct {
	// Revision is the store's revision when the snapshot was taken.
	Revision int64
	// KeyRevision is the revision key was last written at; 0 when the
	// snapshot does not hold key (never written, or deleted).
	KeyRevision int64
}

// Read opens the snapshot at path read-only (a bbolt database, with or
// without the SHA-256 etcd appends to a snapshot) and reads its revision
// and the last write of key.
func Read(path, key string) (Info, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		return Info{}, fmt.Errorf("not an etcd snapshot: %w", err)
	}
	defer func() { _ = db.Close() }()
	var info Info
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(keyBucket)
		if b == nil {
			return errors.New("not an etcd snapshot: it has no key bucket")
		}
		c := b.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if len(k) != revisionKeyLen && len(k) != tombstoneKeyLen {
				return fmt.Errorf("not an etcd snapshot: a key revision of %d bytes", len(k))
			}
			if info.Revision == 0 {
				info.Revision = int64(binary.BigEndian.Uint64(k[:8])) //nolint:gosec // etcd writes int64 revisions
			}
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return fmt.Errorf("not an etcd snapshot: a key value that does not decode: %w", err)
			}
			if string(kv.Key) != key {
				continue
			}
			if len(k) == revisionKeyLen {
				info.KeyRevision = kv.ModRevision
			}
			return nil
		}
		return nil
	})
	return info, err
}
