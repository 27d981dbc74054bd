// Command images builds Ichor's container images from the source, with no
// container daemon, no Dockerfile and no base image from a registry: each is
// one static Go binary on an empty base that holds only CA certificates
// (the Mozilla roots of golang.org/x/crypto/x509roots/fallback, pinned in
// go.sum) and /etc/passwd with the non-root user the binary runs as. It
// writes an OCI layout with an index per component (one image per
// platform, each with its SPDX SBOM attached as an OCI artifact whose
// subject is the image), and an oci-archive tarball per component.
//
// The same commit gives the same digests: binaries are built with
// -trimpath and no build ID, every file's time is the commit's, layers are
// written in a fixed order, and nothing records when or where the build
// ran. Run: go run ./hack/images [-out .local/images] [-push REGISTRY].
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
	"golang.org/x/sync/errgroup"
)

// Component is one image: a command of ./cmd, and the names it also goes
// by inside the image.
type Component struct {
	Name    string
	Aliases []string
}

// Components are Ichor's images.
var Components = []Component{
	{Name: "ichor-apiserver"},
	{Name: "ichor-controller"},
	{Name: "ichor-auth"},
	{Name: "ichor-ui"},
	{Name: "ichor", Aliases: []string{"kubectl-ichor"}},
}

// Platforms are the platforms each image is built for.
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// User is who every image runs as: not root, and no one else on a node
// (the uid distroless images use).
const (
	UserID   = 65532
	UserName = "nonroot"
)

// BinDir is where the binary goes in the image.
const BinDir = "/usr/local/bin"

// Source is the commit images are built from.
type Source struct {
	// Revision is the commit ID, with "-dirty" when the tree has changes.
	Revision string
	// Time is the commit's time: every file's and the images' creation.
	Time time.Time
	// Version is the tag the images get.
	Version string
}

// Options say what to build and where.
type Options struct {
	// Root is the repository's root.
	Root string
	// Out is the directory of the OCI layout (Out/oci) and tarballs.
	Out string
	Source
	Components []Component
	Platforms  []v1.Platform
}

// Built is one component's result.
type Built struct {
	Component Component
	// Index is the digest of the component's image index.
	Index v1.Hash
	// Images are each platform's image digest and compressed size.
	Images []BuiltImage
}

// BuiltImage is one platform's image.
type BuiltImage struct {
	Platform v1.Platform
	Digest   v1.Hash
	Size     int64
	// SBOM is the digest of the SBOM artifact attached to it.
	SBOM v1.Hash
}

func main() {
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	out := flag.String("out", filepath.Join(root, ".local", "images"), "where to write the OCI layout (OUT/oci) and the tarballs")
	version := flag.String("version", "", "the images' tag (default: v0.1.0-<commit>)")
	push := flag.String("push", "", "then push the images and their SBOMs to this registry (host[:port][/path])")
	noBuild := flag.Bool("no-build", false, "push the images already in OUT/oci, without building them")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "the platforms to build each image for (os/arch, comma-separated)")
	flag.Parse()
	only, err := parsePlatforms(*platforms)
	if err != nil {
		fail(err)
	}
	if !*noBuild {
		src, err := SourceOf(root)
		if err != nil {
			fail(err)
		}
		if *version != "" {
			src.Version = *version
		}
		built, err := Build(Options{Root: root, Out: *out, Source: src, Components: Components, Platforms: only})
		if err != nil {
			fail(err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "IMAGE\tINDEX\tPLATFORM\tSIZE\n")
		for _, b := range built {
			for _, img := range b.Images {
				fmt.Fprintf(tw, "%s:%s\t%s\t%s\t%.1f MiB\n", b.Component.Name, src.Version, b.Index, img.Platform.Architecture, float64(img.Size)/(1<<20))
			}
		}
		_ = tw.Flush()
		fmt.Printf("OCI layout: %s; archives: %s/<image>.oci.tar\n", filepath.Join(*out, "oci"), *out)
	}
	if *push != "" {
		refs, err := Push(filepath.Join(*out, "oci"), *push)
		for _, r := range refs {
			fmt.Println("pushed", r)
		}
		if err != nil {
			fail(err)
		}
	}
}

// parsePlatforms reads -platforms: each must be one of Platforms.
func parsePlatforms(list string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, s := range strings.Split(list, ",") {
		i := slices.IndexFunc(Platforms, func(p v1.Platform) bool { return p.OS+"/"+p.Architecture == strings.TrimSpace(s) })
		if i < 0 {
			return nil, fmt.Errorf("-platforms: %q is not one of the platforms Ichor is built for (linux/amd64, linux/arm64)", s)
		}
		out = append(out, Platforms[i])
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "images:", err)
	os.Exit(1)
}

// SourceOf reads the commit of the repository at root.
func SourceOf(root string) (Source, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	rev, err := git("rev-parse", "HEAD")
	if err != nil {
		return Source{}, err
	}
	ct, err := git("log", "-1", "--format=%ct")
	if err != nil {
		return Source{}, err
	}
	secs, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return Source{}, fmt.Errorf("commit time %q: %w", ct, err)
	}
	status, err := git("status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return Source{}, err
	}
	src := Source{Revision: rev, Time: time.Unix(secs, 0).UTC(), Version: "v0.1.0-" + rev[:12]}
	if status != "" {
		src.Revision += "-dirty"
		src.Version += "-dirty"
	}
	return src, nil
}

// Build builds every component for every platform into o.Out.
func Build(o Options) ([]Built, error) {
	work, err := os.MkdirTemp("", "ichor-images-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work) //nolint:errcheck
	base, err := baseLayer(o.Time)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(o.Out, "oci")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, err
	}
	// The binaries first, two builds at a time: a link is one core's work.
	binOf := func(c Component, p v1.Platform) string { return filepath.Join(work, p.Architecture, c.Name) }
	var g errgroup.Group
	g.SetLimit(max(2, runtime.GOMAXPROCS(0)))
	for _, c := range o.Components {
		for _, p := range o.Platforms {
			g.Go(func() error { return goBuild(o.Root, "./cmd/"+c.Name, binOf(c, p), p) })
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var built []Built
	for _, c := range o.Components {
		b := Built{Component: c}
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		var sboms []artifact
		for _, p := range o.Platforms {
			bin := binOf(c, p)
			img, err := image(c, p, o.Source, base, bin)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", c.Name, p.Architecture, err)
			}
			desc, err := descriptorOf(img, p)
			if err != nil {
				return nil, err
			}
			doc, err := SBOM(o.Root, c, p, o.Source, bin, desc.Digest)
			if err != nil {
				return nil, fmt.Errorf("%s %s: SBOM: %w", c.Name, p.Architecture, err)
			}
			sbom, err := sbomArtifact(doc, desc, o.Time)
			if err != nil {
				return nil, err
			}
			sboms = append(sboms, sbom)
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: *desc})
			b.Images = append(b.Images, BuiltImage{Platform: p, Digest: desc.Digest, Size: compressedSize(img), SBOM: sbom.desc.Digest})
		}
		idx = mutate.Annotations(idx, annotations(c, o.Source)).(v1.ImageIndex)
		if b.Index, err = idx.Digest(); err != nil {
			return nil, err
		}
		ref := map[string]string{"org.opencontainers.image.ref.name": c.Name + ":" + o.Version}
		if err := lp.AppendIndex(idx, layout.WithAnnotations(ref)); err != nil {
			return nil, err
		}
		for _, s := range sboms {
			if err := s.write(lp); err != nil {
				return nil, err
			}
		}
		if err := archive(filepath.Join(o.Out, c.Name+".oci.tar"), idx, sboms, ref, o.Time); err != nil {
			return nil, err
		}
		built = append(built, b)
	}
	return built, nil
}

// goBuild builds pkg for p into out, statically and reproducibly.
func goBuild(root, pkg, out string, p v1.Platform) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=-buildvcs=true")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w", pkg, p.OS, p.Architecture, err)
	}
	return nil
}

// annotations are the OCI annotations of a component's index.
func annotations(c Component, src Source) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    c.Name,
		"org.opencontainers.image.version":  src.Version,
		"org.opencontainers.image.revision": src.Revision,
		"org.opencontainers.image.created":  src.Time.Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://ichor.dev/ichor",
	}
}

// image is c's image for p: the base layer, then the binary.
func image(c Component, p v1.Platform, src Source, base v1.Layer, bin string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	entries := []tarEntry{
		{name: "usr/", dir: true}, {name: "usr/local/", dir: true}, {name: "usr/local/bin/", dir: true},
		{name: "usr/local/bin/" + c.Name, data: data, mode: 0o755},
	}
	for _, a := range c.Aliases {
		entries = append(entries, tarEntry{name: "usr/local/bin/" + a, link: c.Name})
	}
	app, err := layerOf(entries, src.Time)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: src.Time}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1),
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "ichor hack/images: CA certificates, /etc/passwd for " + UserName}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "ichor hack/images: go build -trimpath ./cmd/" + c.Name}})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	cfg.Created = created
	cfg.Author = "Ichor"
	cfg.Config = v1.Config{
		Entrypoint: []string{BinDir + "/" + c.Name},
		User:       fmt.Sprintf("%d:%d", UserID, UserID),
		WorkingDir: "/",
		Env:        []string{"PATH=" + BinDir + ":/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		Labels:     annotations(c, src),
	}
	return mutate.ConfigFile(img, cfg)
}

// descriptorOf is img's descriptor in an index, for p.
func descriptorOf(img v1.Image, p v1.Platform) (*v1.Descriptor, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	size, err := img.Size()
	if err != nil {
		return nil, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	return &v1.Descriptor{MediaType: mt, Size: size, Digest: digest, Platform: &p}, nil
}

// compressedSize is the size of img's layers as a registry stores them.
func compressedSize(img v1.Image) int64 {
	layers, _ := img.Layers()
	var n int64
	for _, l := range layers {
		s, _ := l.Size()
		n += s
	}
	return n
}

// baseLayer holds what every image needs besides its binary: the CA
// certificates Go's TLS reads (SSL_CERT_FILE), and /etc/passwd and
// /etc/group naming the user the image runs as, so that a process asking
// who it is gets an answer; /tmp for the few writes a read-only root
// allows into an emptyDir mounted there.
func baseLayer(at time.Time) (v1.Layer, error) {
	var certs bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue // a root trusted only for some certificates cannot be written in a PEM file
		}
		if err := pem.Encode(&certs, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("the fallback bundle has no root certificate")
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", UserName, UserID, UserID, UserName, UserName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, UserID)
	return layerOf([]tarEntry{
		{name: "etc/", dir: true},
		{name: "etc/group", data: []byte(group), mode: 0o644},
		{name: "etc/passwd", data: []byte(passwd), mode: 0o644},
		{name: "etc/ssl/", dir: true},
		{name: "etc/ssl/certs/", dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", data: certs.Bytes(), mode: 0o644},
		{name: "home/", dir: true},
		{name: "home/" + UserName + "/", dir: true, uid: UserID},
		{name: "tmp/", dir: true, mode: 0o1777},
	}, at)
}

// tarEntry is a file, directory or symlink of a layer, owned by root
// unless uid says otherwise.
type tarEntry struct {
	name string
	dir  bool
	link string
	data []byte
	mode int64
	uid  int
}

// layerOf is a gzip-compressed OCI layer of entries, in their order, every
// time at.
func layerOf(entries []tarEntry, at time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	if err := writeTar(&buf, entries, at); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

func writeTar(w io.Writer, entries []tarEntry, at time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, ModTime: at, Uid: e.uid, Gid: e.uid, Format: tar.FormatPAX, Mode: e.mode}
		switch {
		case e.dir:
			h.Typeflag = tar.TypeDir
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		case e.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// artifact is a blob-backed OCI manifest this tool writes itself (an SBOM),
// with its blobs.
type artifact struct {
	desc     v1.Descriptor
	manifest []byte
	blobs    map[v1.Hash][]byte
}

func (a artifact) write(lp layout.Path) error {
	for h, b := range a.blobs {
		if err := lp.WriteBlob(h, io.NopCloser(bytes.NewReader(b))); err != nil {
			return err
		}
	}
	if err := lp.WriteBlob(a.desc.Digest, io.NopCloser(bytes.NewReader(a.manifest))); err != nil {
		return err
	}
	return lp.AppendDescriptor(a.desc)
}

// blob is data's descriptor.
func blob(mt types.MediaType, data []byte) (v1.Descriptor, error) {
	h, size, err := v1.SHA256(bytes.NewReader(data))
	return v1.Descriptor{MediaType: mt, Size: size, Digest: h}, err
}

// SBOMMediaType is an SPDX JSON document's media type.
const SBOMMediaType types.MediaType = "application/spdx+json"

// sbomArtifact wraps doc in an OCI artifact whose subject is the image it
// describes, as referrers of the image find it.
func sbomArtifact(doc []byte, subject *v1.Descriptor, at time.Time) (artifact, error) {
	emptyConfig := []byte("{}")
	cfg, err := blob("application/vnd.oci.empty.v1+json", emptyConfig)
	if err != nil {
		return artifact{}, err
	}
	layer, err := blob(SBOMMediaType, doc)
	if err != nil {
		return artifact{}, err
	}
	subj := *subject
	subj.Platform = nil
	m := v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: string(SBOMMediaType),
		Config: cfg, Layers: []v1.Descriptor{layer}, Subject: &subj,
		Annotations: map[string]string{"org.opencontainers.image.created": at.Format(time.RFC3339)},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return artifact{}, err
	}
	desc, err := blob(types.OCIManifestSchema1, raw)
	if err != nil {
		return artifact{}, err
	}
	desc.ArtifactType = string(SBOMMediaType)
	desc.Annotations = map[string]string{"org.opencontainers.image.ref.name": "sbom-" + strings.TrimPrefix(subject.Digest.String(), "sha256:")[:12]}
	return artifact{desc: desc, manifest: raw, blobs: map[v1.Hash][]byte{cfg.Digest: emptyConfig, layer.Digest: doc}}, nil
}

// archive writes a component's index and SBOMs as an oci-archive: an OCI
// layout in a tar, every file at the commit's time, in sorted order.
func archive(path string, idx v1.ImageIndex, sboms []artifact, ref map[string]string, at time.Time) error {
	dir, err := os.MkdirTemp("", "ichor-image-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir) //nolint:errcheck
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(ref)); err != nil {
		return err
	}
	for _, s := range sboms {
		if err := s.write(lp); err != nil {
			return err
		}
	}
	var files []string
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != dir {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		return err
	}
	slices.Sort(files)
	var entries []tarEntry
	for _, p := range files {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			entries = append(entries, tarEntry{name: rel + "/", dir: true})
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		entries = append(entries, tarEntry{name: rel, data: data, mode: 0o644})
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeTar(f, entries, at); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
