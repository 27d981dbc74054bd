// Package schematic computes Image Factory schematic IDs and the image
// references built from them.
//
// From Talos v1.14 the installer is no longer published as one image per
// release: an Image Factory builds it, and every other boot image, from a
// schematic (system extensions, extra kernel arguments, an overlay…). A
// schematic's ID is the lowercase hex SHA-256 of its canonical YAML form:
// the fields below, in this order, empty ones left out, indented by four
// spaces (sequences too), as the factory's yaml encoder writes them. The
// factory answers any schematic by that ID, so Ichor computes it locally
// and needs the factory only to pull images.
package schematic

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"go.yaml.in/yaml/v4"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// Schematic is an Image Factory schematic, its fields in canonical order.
type Schematic struct {
	Overlay       Overlay       `yaml:"overlay,omitempty"`
	Customization Customization `yaml:"customization"`
}

// Overlay is a board's overlay (Raspberry Pi, Rock Pi …).
type Overlay struct {
	Image   string         `yaml:"image,omitempty"`
	Name    string         `yaml:"name,omitempty"`
	Options map[string]any `yaml:"options,omitempty"`
}

// Customization is what a schematic changes of the stock image.
type Customization struct {
	ExtraKernelArgs  []string         `yaml:"extraKernelArgs,omitempty"`
	Meta             []MetaValue      `yaml:"meta,omitempty"`
	SystemExtensions SystemExtensions `yaml:"systemExtensions,omitempty"`
}

// MetaValue is an initial value of a Talos META key.
type MetaValue struct {
	Key   uint8  `yaml:"key"`
	Value string `yaml:"value"`
}

// SystemExtensions are the official extensions the image carries.
type SystemExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

// EmptyID is the ID of the schematic that changes nothing, the stock image.
const EmptyID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

// Marshal is s in its canonical form, the bytes its ID hashes.
func (s Schematic) Marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(4)
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("encode schematic: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode schematic: %w", err)
	}
	return b.Bytes(), nil
}

// ID is s's schematic ID, as the Image Factory computes it.
func (s Schematic) ID() (string, error) {
	data, err := s.Marshal()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// Factory is an Image Factory: its image registry and its HTTP address
// (the same host for the public factory; a self-hosted one or a mirror may
// differ).
type Factory struct {
	// Registry is where its installer images are pulled from, a host[:port].
	Registry string
	// URL is the https address its boot images are downloaded from.
	URL string
}

// FactoryOf is the factory an installation names; its registry defaults
// to its URL's host.
func FactoryOf(f *v1alpha1.ImageFactory) Factory {
	out := Factory{URL: f.URL, Registry: f.Registry}
	if out.Registry == "" {
		if u, err := url.Parse(f.URL); err == nil {
			out.Registry = u.Host
		}
	}
	return out
}

// Of is the schematic an API object names; nil is the empty schematic.
// Overlay options are a YAML mapping.
func Of(s *v1alpha1.Schematic) (Schematic, error) {
	var out Schematic
	if s == nil {
		return out, nil
	}
	out.Customization.SystemExtensions.OfficialExtensions = s.SystemExtensions
	out.Customization.ExtraKernelArgs = s.ExtraKernelArgs
	if o := s.Overlay; o != nil {
		out.Overlay = Overlay{Name: o.Name, Image: o.Image}
		if o.Options != "" {
			if err := yaml.Unmarshal([]byte(o.Options), &out.Overlay.Options); err != nil {
				return Schematic{}, fmt.Errorf("overlay options must be a YAML mapping: %w", err)
			}
		}
	}
	return out, nil
}

// Installer is the installer image of schematic id at Talos version, the
// one for SecureBoot when secureBoot.
func (f Factory) Installer(id, version string, secureBoot bool) string {
	repo := "installer"
	if secureBoot {
		repo = "installer-secureboot"
	}
	return f.Registry + "/" + repo + "/" + id + ":" + version
}

// ParseInstaller reads back an installer reference Installer made: the
// factory's registry (URL is the factory's address, which the reference
// does not hold), the schematic ID and the version.
func ParseInstaller(ref, url string) (f Factory, id, version string, secureBoot bool, err error) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") || i == len(ref)-1 { // a registry's port is no tag
		return Factory{}, "", "", false, fmt.Errorf("installer %q has no version tag", ref)
	}
	rest, version := ref[:i], ref[i+1:]
	if version == "" {
		return Factory{}, "", "", false, fmt.Errorf("installer %q has no version tag", ref)
	}
	for _, repo := range []string{"/installer-secureboot/", "/installer/"} {
		if registry, id, found := strings.Cut(rest, repo); found && registry != "" && id != "" && !strings.Contains(id, "/") {
			return Factory{Registry: registry, URL: url}, id, version, repo == "/installer-secureboot/", nil
		}
	}
	return Factory{}, "", "", false, fmt.Errorf("installer %q is not an image factory's <registry>/installer/<schematic ID>:<version>", ref)
}

// Image is the download URL of a boot image of schematic id at Talos
// version: file is the factory's name for it (metal-amd64.iso,
// metal-amd64.raw.zst, kernel-amd64 …).
func (f Factory) Image(id, version, file string) string {
	return strings.TrimSuffix(f.URL, "/") + "/image/" + id + "/" + version + "/" + file
}

// Medium is one way to boot or install a schematic: its name for people
// and where it is.
type Medium struct {
	// Name says what it is: iso, disk-image, pxe, kernel, initramfs, uki, installer.
	Name string
	// Ref is its URL, or the installer's image reference.
	Ref string
}

// Media are the ways to boot schematic id at Talos version on a bare-metal
// machine of arch (amd64, arm64), as the factory names them: the SecureBoot
// ISO and UKI when secureBoot, else the ISO, the disk image, the PXE script
// and the kernel and initramfs it boots; and the installer an upgrade pulls.
func (f Factory) Media(id, version, arch string, secureBoot bool) []Medium {
	file := func(name string) string { return f.Image(id, version, name) }
	if secureBoot {
		return []Medium{
			{"iso", file("metal-" + arch + "-secureboot.iso")},
			{"uki", file("metal-" + arch + "-secureboot-uki.efi")},
			{"installer", f.Installer(id, version, true)},
		}
	}
	return []Medium{
		{"iso", file("metal-" + arch + ".iso")},
		{"disk-image", file("metal-" + arch + ".raw.zst")},
		{"pxe", f.PXE(id, version, "metal", arch)},
		{"kernel", file("kernel-" + arch)},
		{"initramfs", file("initramfs-" + arch + ".xz")},
		{"installer", f.Installer(id, version, false)},
	}
}

// Arches are the machine architectures the factory builds for.
var Arches = []string{"amd64", "arm64"}

// PXE is the iPXE script URL that boots schematic id at Talos version.
func (f Factory) PXE(id, version, platform, arch string) string {
	return strings.TrimSuffix(f.URL, "/") + "/pxe/" + id + "/" + version + "/" + platform + "-" + arch
}
