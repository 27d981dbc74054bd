package main

import (
	"archive/tar"
	"bytes"
	"cmp"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"ichor.dev/ichor/test/ociimage"
)

// TestImagesAreReproducibleAndComplete runs `go run ./hack/images` (what
// make images runs) twice on this tree and wants the same digests; then
// looks inside the images as a runtime would: each platform's binary is a
// static ELF for its architecture, run as the non-root user /etc/passwd
// names, with CA certificates Go's TLS reads; each image has its SBOM
// attached, listing what the binary links with their licences; each
// component's archive is an OCI layout; the images of this machine's
// architecture run in runc. Last, it pushes them to a registry on loopback.
// The builds run in their own process: under the race detector, compressing
// the layers alone would take most of the test's time limit.
func TestImagesAreReproducibleAndComplete(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	src, err := SourceOf(root)
	if err != nil {
		t.Fatal(err)
	}
	images := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("go", append([]string{"run", "./hack/images"}, args...)...)
		cmd.Dir, cmd.Env = root, append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go run ./hack/images %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out, again := t.TempDir(), t.TempDir()
	t.Log(images(nil, "-out", out))
	images(nil, "-out", again)
	first, err := layoutOf(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := layoutOf(filepath.Join(again, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(first.refs, second.refs) || len(first.refs) != len(Components) {
		t.Errorf("two builds of the same tree: %v, then %v", first.refs, second.refs)
	}

	runc := runcPath(t, root)
	for _, c := range Components {
		digest, ok := first.refs[c.Name+":"+src.Version]
		if !ok {
			t.Errorf("%s: the layout names %v, not %s:%s", c.Name, first.refs, c.Name, src.Version)
			continue
		}
		idx, err := first.top.ImageIndex(digest)
		if err != nil {
			t.Fatal(err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var archs []string
		for _, d := range im.Manifests {
			arch := d.Platform.Architecture
			archs = append(archs, arch)
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkImage(t, c, arch, img)
			if layer, ok := first.sboms[d.Digest]; !ok {
				t.Errorf("%s %s: no SBOM describes it", c.Name, arch)
			} else {
				checkSBOM(t, first.path, c, layer)
			}
			// As a runtime runs it: its entrypoint, as its user, on its
			// read-only root, in namespaces of its own (a network of its
			// own loopback alone).
			if arch == runtime.GOARCH {
				if out := runInRunc(t, runc, img, "--help"); !strings.Contains(strings.ToLower(out), "usage") {
					t.Errorf("%s --help in runc printed no usage:\n%s", c.Name, out)
				}
			}
		}
		if !slices.Equal(archs, []string{"amd64", "arm64"}) {
			t.Errorf("%s: platforms %v", c.Name, archs)
		}
		if ar, err := os.ReadFile(filepath.Join(out, c.Name+".oci.tar")); err != nil || !tarHas(ar, "index.json", "oci-layout") {
			t.Errorf("%s: the archive is not an OCI layout: %v", c.Name, err)
		}
	}

	// make push, to a registry served over TLS on loopback here: each image
	// keeps its digest, and its SBOM is among its referrers.
	srv := httptest.NewTLSServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "https://")
	images([]string{"SSL_CERT_FILE=" + caFile, "DOCKER_CONFIG=" + t.TempDir()}, "-out", out, "-no-build", "-push", host+"/ichor")
	trust := remote.WithTransport(srv.Client().Transport)
	for _, c := range Components {
		ref, err := name.ParseReference(host + "/ichor/" + c.Name + ":" + src.Version)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(ref, trust)
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := idx.Digest(); d != first.refs[c.Name+":"+src.Version] {
			t.Errorf("%s: pushed as %s, built as %s", c.Name, d, first.refs[c.Name+":"+src.Version])
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range im.Manifests {
			referrers, err := remote.Referrers(ref.Context().Digest(d.Digest.String()), trust)
			if err != nil {
				t.Fatal(err)
			}
			rm, _ := referrers.IndexManifest()
			if len(rm.Manifests) != 1 || rm.Manifests[0].Digest != first.sbomOf[d.Digest] {
				t.Errorf("%s: the referrers of its %s image are %+v, want its SBOM %s", c.Name, d.Platform.Architecture, rm.Manifests, first.sbomOf[d.Digest])
				continue
			}
			// The registry's summary may take the artifact's type from
			// its config; the manifest itself says.
			got, err := remote.Get(ref.Context().Digest(rm.Manifests[0].Digest.String()), trust)
			if err != nil {
				t.Fatal(err)
			}
			m, err := v1.ParseManifest(bytes.NewReader(got.Manifest))
			if err != nil || m.ArtifactType != string(SBOMMediaType) || len(m.Layers) != 1 || m.Layers[0].MediaType != SBOMMediaType {
				t.Errorf("%s: the pushed SBOM artifact: %+v (%v)", c.Name, m, err)
			}
		}
	}
}

// builtLayout is what an OCI layout hack/images wrote holds.
type builtLayout struct {
	path layout.Path
	top  v1.ImageIndex
	// refs are the components' index digests, by ref name.
	refs map[string]v1.Hash
	// sboms are the SBOM layers, and sbomOf the SBOM artifacts, by the
	// image they describe.
	sboms  map[v1.Hash]v1.Descriptor
	sbomOf map[v1.Hash]v1.Hash
}

func layoutOf(dir string) (*builtLayout, error) {
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
	b := &builtLayout{path: lp, top: top, refs: map[string]v1.Hash{}, sboms: map[v1.Hash]v1.Descriptor{}, sbomOf: map[v1.Hash]v1.Hash{}}
	for _, d := range manifest.Manifests {
		if d.ArtifactType != string(SBOMMediaType) {
			b.refs[d.Annotations["org.opencontainers.image.ref.name"]] = d.Digest
			continue
		}
		raw, err := lp.Bytes(d.Digest)
		if err != nil {
			return nil, err
		}
		var m v1.Manifest
		if err := json.Unmarshal(raw, &m); err != nil || m.Subject == nil || len(m.Layers) != 1 {
			return nil, fmt.Errorf("SBOM artifact %s: no subject or no document (%v)", d.Digest, err)
		}
		b.sboms[m.Subject.Digest], b.sbomOf[m.Subject.Digest] = m.Layers[0], d.Digest
	}
	return b, nil
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

// runcPath is Debian's runc: ICHOR_RUNC, or what hack/install-runc.sh
// installs and prints.
func runcPath(t *testing.T, root string) string {
	t.Helper()
	if p := os.Getenv("ICHOR_RUNC"); p != "" {
		return p
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "hack", "install-runc.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/install-runc.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// runInRunc unpacks img into an OCI bundle and runs its entrypoint with
// args, as the user its config names, on a read-only root with /tmp a
// tmpfs; it returns what the process printed, and fails the test unless it
// exits 0.
func runInRunc(t *testing.T, runc string, img v1.Image, args ...string) string {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	bundle := t.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	if err := ociimage.Unpack(img, rootfs); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(runc, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	specPath := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	var uid, gid int
	if _, err := fmt.Sscanf(cfg.Config.User, "%d:%d", &uid, &gid); err != nil {
		t.Fatalf("the image's user %q is not uid:gid", cfg.Config.User)
	}
	process := spec["process"].(map[string]any)
	process["terminal"] = false
	process["args"] = append(slices.Clone(cfg.Config.Entrypoint), args...)
	process["env"] = cfg.Config.Env
	process["cwd"] = cmp.Or(cfg.Config.WorkingDir, "/")
	process["user"] = map[string]any{"uid": uid, "gid": gid}
	spec["root"] = map[string]any{"path": "rootfs", "readonly": true}
	spec["mounts"] = append(spec["mounts"].([]any), map[string]any{
		"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777"}})
	if data, err = json.Marshal(spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(specPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	id := fmt.Sprintf("ichor-image-test-%d", time.Now().UnixNano())
	cmd := exec.Command(runc, "--root", state, "run", "--bundle", bundle, id)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		_ = exec.Command(runc, "--root", state, "delete", "--force", id).Run()
		t.Fatalf("runc run %v: %v\n%s", process["args"], err, out.String())
	}
	return out.String()
}
