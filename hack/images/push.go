package main

import (
	"bytes"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Push copies every image of the OCI layout at dir, with the SBOMs
// attached to them, to registry (host[:port][/path]), each component to its
// repository there (registry/ichor-apiserver, …) under the tag the layout
// names. Credentials come from the Docker config, as docker and crane read
// them; options add to that (a transport that trusts a private CA). It
// returns the references pushed.
func Push(dir, registry string, options ...remote.Option) ([]string, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	manifest, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	opts := append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}, options...)
	// Each image's repository, for its SBOM to follow it there.
	repoOf := map[v1.Hash]name.Repository{}
	var pushed []string
	for _, d := range manifest.Manifests {
		ref := d.Annotations["org.opencontainers.image.ref.name"]
		if d.ArtifactType == string(SBOMMediaType) || ref == "" {
			continue
		}
		tag, err := name.NewTag(registry + "/" + ref)
		if err != nil {
			return pushed, fmt.Errorf("%s: %w", ref, err)
		}
		idx, err := top.ImageIndex(d.Digest)
		if err != nil {
			return pushed, err
		}
		if err := remote.WriteIndex(tag, idx, opts...); err != nil {
			return pushed, fmt.Errorf("push %s: %w", tag, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return pushed, err
		}
		for _, img := range im.Manifests {
			repoOf[img.Digest] = tag.Repository
		}
		pushed = append(pushed, tag.String()+"@"+d.Digest.String())
	}
	for _, d := range manifest.Manifests {
		if d.ArtifactType != string(SBOMMediaType) {
			continue
		}
		if err := pushArtifact(lp, d, repoOf, opts); err != nil {
			return pushed, err
		}
	}
	return pushed, nil
}

// pushArtifact pushes an SBOM artifact of the layout, by digest, to the
// repository of the image it describes.
func pushArtifact(lp layout.Path, d v1.Descriptor, repoOf map[v1.Hash]name.Repository, opts []remote.Option) error {
	raw, err := lp.Bytes(d.Digest)
	if err != nil {
		return err
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	if m.Subject == nil {
		return fmt.Errorf("artifact %s has no subject", d.Digest)
	}
	repo, ok := repoOf[m.Subject.Digest]
	if !ok {
		return fmt.Errorf("artifact %s describes %s, which the layout has no image of", d.Digest, m.Subject.Digest)
	}
	for _, b := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		data, err := lp.Bytes(b.Digest)
		if err != nil {
			return err
		}
		if err := remote.WriteLayer(repo, blobLayer{data: data, desc: b}, opts...); err != nil {
			return fmt.Errorf("push blob %s to %s: %w", b.Digest, repo, err)
		}
	}
	if err := remote.Put(repo.Digest(d.Digest.String()), rawManifest{raw: raw, mt: d.MediaType}, opts...); err != nil {
		return fmt.Errorf("push the SBOM of %s to %s: %w", m.Subject.Digest, repo, err)
	}
	return nil
}

// blobLayer is a blob pushed as it is, uncompressed.
type blobLayer struct {
	data []byte
	desc v1.Descriptor
}

func (b blobLayer) Digest() (v1.Hash, error)            { return b.desc.Digest, nil }
func (b blobLayer) DiffID() (v1.Hash, error)            { return b.desc.Digest, nil }
func (b blobLayer) Size() (int64, error)                { return b.desc.Size, nil }
func (b blobLayer) MediaType() (types.MediaType, error) { return b.desc.MediaType, nil }
func (b blobLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(b.data)), nil
}
func (b blobLayer) Uncompressed() (io.ReadCloser, error) { return b.Compressed() }

// rawManifest is a manifest pushed byte for byte.
type rawManifest struct {
	raw []byte
	mt  types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }
