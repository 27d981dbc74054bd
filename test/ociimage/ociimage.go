// Package ociimage reads the images `make images` writes: it finds one in
// an OCI layout by reference or digest, for a platform, and unpacks its
// filesystem as a container runtime does.
package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// refName is the annotation an OCI layout names an image by (name:tag).
const refName = "org.opencontainers.image.ref.name"

// Find returns the image of platform that ref names in the layout at dir.
// ref is an image reference as a pod spec gives it (registry/name:tag or
// registry/name@sha256:…): by digest it matches the image index of that
// digest; by tag, the layout's name:tag, whatever the registry.
func Find(dir, ref string, platform v1.Platform) (v1.Image, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	repo, tag, digest := split(ref)
	for _, d := range m.Manifests {
		match := digest != "" && d.Digest.String() == digest
		if digest == "" {
			match = d.Annotations[refName] == repo+":"+tag
		}
		if !match {
			continue
		}
		idx, err := top.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, pd := range im.Manifests {
			if pd.Platform != nil && pd.Platform.OS == platform.OS && pd.Platform.Architecture == platform.Architecture {
				return idx.Image(pd.Digest)
			}
		}
		return nil, fmt.Errorf("image %s has no %s/%s image", ref, platform.OS, platform.Architecture)
	}
	return nil, fmt.Errorf("image %s is not in %s", ref, dir)
}

// split takes the last path element of ref (the repository's name, without
// its registry) and its tag or digest.
func split(ref string) (repo, tag, digest string) {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref, digest = ref[:i], ref[i+1:]
	}
	repo = ref[strings.LastIndex(ref, "/")+1:]
	if i := strings.LastIndex(repo, ":"); i >= 0 {
		repo, tag = repo[:i], repo[i+1:]
	}
	if tag == "" {
		tag = "latest"
	}
	return repo, tag, digest
}

// Unpack writes img's flattened filesystem to dir, with each file's mode
// and owner.
func Unpack(img v1.Image, dir string) error {
	r := mutate.Extract(img)
	defer r.Close() //nolint:errcheck
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(h.Mode)&os.ModePerm); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(h.Mode)&os.ModePerm|modeBits(h.Mode)); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil { //nolint:gosec // our own images
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(h.Mode)&os.ModePerm); err != nil {
				return err
			}
		default:
			continue
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			return err
		}
	}
}

// modeBits are the sticky bit of a tar mode, which /tmp needs.
func modeBits(mode int64) os.FileMode {
	var m os.FileMode
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}
