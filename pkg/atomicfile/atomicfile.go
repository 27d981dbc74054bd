// Package atomicfile replaces files whole. What is written goes to a
// temporary file beside the file it replaces, which is synced, closed and
// renamed over it: a reader, or a crash, sees the old file or the new one,
// never part of one, and a failed write leaves the old file as it was and
// no temporary file behind.
package atomicfile

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile replaces path with what write writes, at perm (not masked by
// the umask, and never inherited from the file it replaces).
func WriteFile(path string, perm fs.FileMode, write func(io.Writer) error) error {
	p, err := Stage(path, perm, write)
	if err != nil {
		return err
	}
	return p.Commit()
}

// Pending is a replacement of a file, written and synced beside it but not
// yet in its place. One of Commit or Abort ends it.
type Pending struct {
	path, tmp string
}

// Stage writes the replacement of path, at perm, without putting it in
// place: Commit does, for callers that replace a file only once something
// else succeeded too.
func Stage(path string, perm fs.FileMode, write func(io.Writer) error) (*Pending, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, err
	}
	if err := fill(tmp, perm, write); err != nil {
		_ = os.Remove(tmp.Name())
		return nil, err
	}
	return &Pending{path: path, tmp: tmp.Name()}, nil
}

// fill writes f whole and closes it.
func fill(f *os.File, perm fs.FileMode, write func(io.Writer) error) error {
	err := f.Chmod(perm)
	if err == nil {
		err = write(f)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Commit puts the replacement in place of the file. When it cannot, the
// replacement is removed and the file is as it was.
func (p *Pending) Commit() error {
	if err := os.Rename(p.tmp, p.path); err != nil {
		_ = os.Remove(p.tmp)
		return err
	}
	return nil
}

// Abort removes the replacement; the file is as it was.
func (p *Pending) Abort() { _ = os.Remove(p.tmp) }
