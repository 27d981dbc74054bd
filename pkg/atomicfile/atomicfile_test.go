package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

// entries are the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestWriteFileReplacesTheFileAtItsMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, 0o600, writeString("new")); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "new" {
		t.Fatalf("read %q, %v", data, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600 (not the old file's)", fi.Mode().Perm())
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("the directory holds %v", got)
	}
}

func TestAFailedWriteLeavesTheOldFileAndNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "snapshot")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	cut := errors.New("the stream was cut")
	err := WriteFile(path, 0o600, func(w io.Writer) error {
		_, _ = io.WriteString(w, "half of the n")
		return cut
	})
	if !errors.Is(err, cut) {
		t.Fatalf("WriteFile = %v, want the write's error", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "old" {
		t.Errorf("the file holds %q after a failed write", data)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v after a failed write", fi.Mode().Perm())
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("a failed write left %v", got)
	}
}

func TestAFailedWriteOfANewFileLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "new"), 0o600, func(io.Writer) error { return errors.New("no") }); err == nil {
		t.Fatal("WriteFile succeeded")
	}
	if got := entries(t, dir); len(got) != 0 {
		t.Errorf("a failed write left %v", got)
	}
}

func TestAFailedRenameLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "taken")
	// A non-empty directory cannot be renamed over.
	if err := os.MkdirAll(filepath.Join(path, "inside"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, 0o600, writeString("x")); err == nil {
		t.Fatal("WriteFile over a directory succeeded")
	}
	if got := entries(t, dir); len(got) != 1 || got[0] != "taken" {
		t.Errorf("a failed rename left %v", got)
	}
}

func TestAMissingDirectoryIsAnError(t *testing.T) {
	if err := WriteFile(filepath.Join(t.TempDir(), "no", "file"), 0o600, writeString("x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WriteFile = %v, want not exist", err)
	}
}

func TestStageWaitsForCommit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bundle")
	p, err := Stage(path, 0o600, writeString("sealed"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a staged file is in place: %v", err)
	}
	p.Abort()
	if got := entries(t, dir); len(got) != 0 {
		t.Fatalf("an aborted stage left %v", got)
	}

	if p, err = Stage(path, 0o600, writeString("sealed")); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); string(data) != "sealed" {
		t.Errorf("committed %q", data)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("a commit left %v", got)
	}
}
