package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestImagesAreReproducibleAndComplete builds every image twice from this
// tree and wants the same digests; then looks inside them as a runtime
// would: each platform's binary is a static ELF for its architecture, run
// as the non-root user /etc/passwd names, with CA certificates Go's TLS
// reads; each image has its SBOM attached, listing what the binary links
// with their licences; each component's archive is an OCI layout.
func TestImagesAreReproducibleAndComplete(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	src, err := SourceOf(root)
	if err != nil {
		t.Fatal(err)
	}
	build := func() (string, []Built) {
		out := t.TempDir()
		built, err := Build(Options{Root: root, Out: out, Source: src, Components: Components, Platforms: Platforms})
		if err != nil {
			t.Fatal(err)
		}
		return out, built
	}
	out, first := build()
	_, second := build()
	for i := range first {
		if first[i].Index != second[i].Index {
			t.Errorf("%s: index %s, then %s from the same tree", first[i].Component.Name, first[i].Index, second[i].Index)
		}
	}

	lp, err := layout.FromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]v1.Hash{}
	sboms := map[v1.Hash]v1.Descriptor{} // by the image they describe
	for _, d := range manifest.Manifests {
		if d.ArtifactType == string(SBOMMediaType) {
			raw, err := lp.Bytes(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			var m v1.Manifest
			if err := json.Unmarshal(raw, &m); err != nil || m.Subject == nil {
				t.Fatalf("SBOM artifact %s: no subject (%v)", d.Digest, err)
			}
			sboms[m.Subject.Digest] = m.Layers[0]
			continue
		}
		refs[d.Annotations["org.opencontainers.image.ref.name"]] = d.Digest
	}
	for _, b := range first {
		name := b.Component.Name
		digest, ok := refs[name+":"+src.Version]
		if !ok || digest != b.Index {
			t.Errorf("%s: the layout names %v, want %s:%s at %s", name, refs, name, src.Version, b.Index)
			continue
		}
		idx, err := top.ImageIndex(digest)
		if err != nil {
			t.Fatal(err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var archs []string
		for _, d := range im.Manifests {
			archs = append(archs, d.Platform.Architecture)
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkImage(t, b.Component, d.Platform.Architecture, img)
			layer, ok := sboms[d.Digest]
			if !ok {
				t.Errorf("%s %s: no SBOM describes it", name, d.Platform.Architecture)
				continue
			}
			checkSBOM(t, lp, b.Component, layer)
		}
		if !slices.Equal(archs, []string{"amd64", "arm64"}) {
			t.Errorf("%s: platforms %v", name, archs)
		}
		if ar, err := os.ReadFile(filepath.Join(out, name+".oci.tar")); err != nil || !tarHas(ar, "index.json", "oci-layout") {
			t.Errorf("%s: the archive is not an OCI layout: %v", name, err)
		}
	}

	// Pushed to a registry (one served over TLS on loopback here), each
	// image keeps its digest, and its SBOM is among its referrers.
	srv := httptest.NewTLSServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	trust := remote.WithTransport(srv.Client().Transport)
	pushed, err := Push(filepath.Join(out, "oci"), host+"/ichor", trust)
	if err != nil || len(pushed) != len(Components) {
		t.Fatalf("push: %v (%d pushed)", err, len(pushed))
	}
	for _, b := range first {
		ref, err := name.ParseReference(host + "/ichor/" + b.Component.Name + ":" + src.Version)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(ref, trust)
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := idx.Digest(); d != b.Index {
			t.Errorf("%s: pushed as %s, built as %s", b.Component.Name, d, b.Index)
		}
		img := b.Images[0]
		referrers, err := remote.Referrers(ref.Context().Digest(img.Digest.String()), trust)
		if err != nil {
			t.Fatal(err)
		}
		rm, _ := referrers.IndexManifest()
		if len(rm.Manifests) != 1 || rm.Manifests[0].Digest != img.SBOM {
			t.Errorf("%s: the referrers of its %s image are %+v, want its SBOM %s", b.Component.Name, img.Platform.Architecture, rm.Manifests, img.SBOM)
			continue
		}
		// The registry's summary may take the artifact's type from its
		// config; the manifest itself says.
		got, err := remote.Get(ref.Context().Digest(img.SBOM.String()), trust)
		if err != nil {
			t.Fatal(err)
		}
		m, err := v1.ParseManifest(bytes.NewReader(got.Manifest))
		if err != nil || m.ArtifactType != string(SBOMMediaType) || len(m.Layers) != 1 || m.Layers[0].MediaType != SBOMMediaType {
			t.Errorf("%s: the pushed SBOM artifact: %+v (%v)", b.Component.Name, m, err)
		}
	}
}

// checkImage looks at one image's config and files.
func checkImage(t *testing.T, c Component, arch string, img v1.Image) {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	bin := BinDir + "/" + c.Name
	if cfg.Architecture != arch || cfg.Config.User != "65532:65532" || !slices.Equal(cfg.Config.Entrypoint, []string{bin}) {
		t.Errorf("%s %s: config %s, user %q, entrypoint %v", c.Name, arch, cfg.Architecture, cfg.Config.User, cfg.Config.Entrypoint)
	}
	files := map[string][]byte{}
	links := map[string]string{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeSymlink {
			links["/"+h.Name] = h.Linkname
			continue
		}
		if h.Typeflag == tar.TypeReg {
			if files["/"+h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !strings.Contains(string(files["/etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("%s %s: /etc/passwd does not name the user the image runs as", c.Name, arch)
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(files["/etc/ssl/certs/ca-certificates.crt"]) {
		t.Errorf("%s %s: no CA certificate", c.Name, arch)
	}
	f, err := elf.NewFile(bytes.NewReader(files[bin]))
	if err != nil {
		t.Fatalf("%s %s: %s is not an ELF binary: %v", c.Name, arch, bin, err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	interp := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	if f.Machine != want || interp {
		t.Errorf("%s %s: machine %s, dynamic %v; want a static %s binary", c.Name, arch, f.Machine, interp, want)
	}
	for _, a := range c.Aliases {
		if links[BinDir+"/"+a] != c.Name {
			t.Errorf("%s %s: %s does not link to %s", c.Name, arch, a, c.Name)
		}
	}
}

// checkSBOM reads an image's SPDX document.
func checkSBOM(t *testing.T, lp layout.Path, c Component, layer v1.Descriptor) {
	t.Helper()
	raw, err := lp.Bytes(layer.Digest)
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(raw, &doc); err != nil || doc.SPDXVersion != "SPDX-2.3" {
		t.Fatalf("%s: SBOM %v", c.Name, err)
	}
	licences := map[string]string{}
	for _, p := range doc.Packages {
		licences[p.Name] = p.LicenseDeclared
	}
	// Every image links client-go; the licence report classified it.
	if licences["k8s.io/client-go"] != "Apache-2.0" || licences["stdlib"] != "BSD-3-Clause" || len(doc.Packages) < 20 {
		t.Errorf("%s: SBOM of %d packages, client-go %q", c.Name, len(doc.Packages), licences["k8s.io/client-go"])
	}
	for name, l := range licences {
		if l == "NOASSERTION" {
			t.Errorf("%s: SBOM has no licence for %s", c.Name, name)
		}
	}
}

// tarHas reports whether the tar data holds every file of names.
func tarHas(data []byte, names ...string) bool {
	tr := tar.NewReader(bytes.NewReader(data))
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		seen[h.Name] = true
	}
	return !slices.ContainsFunc(names, func(n string) bool { return !seen[n] })
}
