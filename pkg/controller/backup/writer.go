package backup

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"filippo.io/age"
	"gocloud.dev/blob"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/archive"
	"ichor.dev/ichor/pkg/backup/store"
)

// writer writes one backup's files into its folder of a target.
type writer struct {
	target      *store.Target
	folder      string
	recipients  []age.Recipient
	compression v1alpha1.BackupCompression
	files       []v1alpha1.BackupFile
}

// storeError is a failure of the target, not of the content's source.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// write streams content into the file name (the extension added).
func (w *writer) write(ctx context.Context, name string, content v1alpha1.BackupContent, machine string, src io.Reader) error {
	name += archive.Extension(w.compression)
	key := w.folder + name
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bw, err := w.target.NewWriter(ctx, key, store.WriterOptions)
	if err != nil {
		return &storeError{store.Explain(err)}
	}
	source := &readErr{r: src}
	sum, err := archive.Write(bw, source, w.recipients, w.compression)
	if err != nil {
		cancel() // a writer closed after its context ends discards what it got
		_ = bw.Close()
		if source.err != nil {
			return err // the node's stream broke, not the target
		}
		return &storeError{store.Explain(err)}
	}
	if err := bw.Close(); err != nil {
		return &storeError{store.Explain(err)}
	}
	w.files = append(w.files, v1alpha1.BackupFile{
		Name: name, Content: content, Machine: machine,
		StoredSize: sum.Size, ContentSize: sum.ContentSize, Digest: sum.Digest,
	})
	return nil
}

// readErr remembers the error its reader returned, other than io.EOF: what
// failed, the content's source or the target.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// Manifest is backup.json: what a backup holds, for whoever restores it
// without the TalosBackup object. It holds no secret.
type Manifest struct {
	Backup      string                     `json:"backup"`
	Namespace   string                     `json:"namespace"`
	Cluster     string                     `json:"cluster"`
	StartedAt   time.Time                  `json:"startedAt"`
	Recipients  []string                   `json:"recipients"`
	Compression v1alpha1.BackupCompression `json:"compression"`
	Files       []v1alpha1.BackupFile      `json:"files"`
}

func (w *writer) manifest(ctx context.Context, b *v1alpha1.TalosBackup, cluster *v1alpha1.TalosCluster) error {
	m := Manifest{Backup: b.Name, Namespace: b.Namespace, Cluster: cluster.Name, Recipients: b.Status.Recipients,
		Compression: b.Status.Compression, Files: w.files}
	if b.Status.StartedAt != nil {
		m.StartedAt = b.Status.StartedAt.UTC()
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	key := w.folder + ManifestFile
	if err := w.target.WriteAll(ctx, key, append(data, '\n'), &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return &storeError{store.Explain(err)}
	}
	return nil
}
