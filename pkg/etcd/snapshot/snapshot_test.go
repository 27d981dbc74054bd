package snapshot

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// write makes an etcd-like backend at path: a key bucket holding, at
// revisions 1.., the given writes (a key with "-" deleted).
func write(t *testing.T, path string, writes ...string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(keyBucket)
		if err != nil {
			return err
		}
		for i, w := range writes {
			rev := int64(i + 1)
			k := make([]byte, revisionKeyLen, tombstoneKeyLen)
			binary.BigEndian.PutUint64(k, uint64(rev))
			k[8] = '_'
			key, deleted := strings.CutPrefix(w, "-")
			if deleted {
				k = append(k, 't')
			}
			v, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte(key), ModRevision: rev, Value: []byte("v")})
			if err != nil {
				return err
			}
			if err := b.Put(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRead(t *testing.T) {
	const ns = "/registry/namespaces/kube-system"
	for _, tc := range []struct {
		name   string
		writes []string
		want   Info
	}{
		{"last write of the key", []string{ns, "/registry/a", ns, "/registry/b"}, Info{Revision: 4, KeyRevision: 3}},
		{"never written", []string{"/registry/a", "/registry/b"}, Info{Revision: 2}},
		{"deleted after it was written", []string{ns, "/registry/a", "-" + ns}, Info{Revision: 3}},
		{"written again after a deletion", []string{ns, "-" + ns, ns}, Info{Revision: 3, KeyRevision: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "db")
			write(t, path, tc.writes...)
			got, err := Read(path, ns)
			if err != nil || got != tc.want {
				t.Fatalf("Read = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestReadRefusesWhatIsNoSnapshot(t *testing.T) {
	dir := t.TempDir()
	notBolt := filepath.Join(dir, "text")
	if err := os.WriteFile(notBolt, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(notBolt, "k"); err == nil || !strings.Contains(err.Error(), "not an etcd snapshot") {
		t.Errorf("a text file: %v", err)
	}
	noBucket := filepath.Join(dir, "empty.db")
	db, err := bolt.Open(noBucket, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Read(noBucket, "k"); err == nil || !strings.Contains(err.Error(), "no key bucket") {
		t.Errorf("a database without etcd's buckets: %v", err)
	}
}
