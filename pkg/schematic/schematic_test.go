package schematic

import (
	"strings"
	"testing"
)

// TestIDsTheFactoryPublishes checks the ID against schematics whose IDs the
// Image Factory publishes (Talos's own default installer is the empty one;
// the others are what the factory's site gives for those extensions, as
// people quote them beside their installer images).
func TestIDsTheFactoryPublishes(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Schematic
		id   string
	}{
		{"empty", Schematic{}, EmptyID},
		{"an empty list is no list", Schematic{Customization: Customization{ExtraKernelArgs: []string{}}}, EmptyID},
		{"qemu-guest-agent", Schematic{Customization: Customization{SystemExtensions: SystemExtensions{
			OfficialExtensions: []string{"siderolabs/qemu-guest-agent"}}}},
			"ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"},
		{"iscsi-tools and util-linux-tools", Schematic{Customization: Customization{SystemExtensions: SystemExtensions{
			OfficialExtensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}}}},
			"613e1592b2da41ae5e265e8789429f22e121aab91cb4deb6bc3c0b6262961245"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := tc.s.ID()
			if err != nil {
				t.Fatal(err)
			}
			if id != tc.id {
				data, _ := tc.s.Marshal()
				t.Fatalf("ID %s, the factory's is %s; canonical form:\n%s", id, tc.id, data)
			}
		})
	}
}

// TestCanonicalForm pins the encoding of every field: order, four-space
// indentation, sequences indented, empty fields left out.
func TestCanonicalForm(t *testing.T) {
	s := Schematic{
		Overlay: Overlay{Image: "siderolabs/sbc-raspberrypi", Name: "rpi_generic"},
		Customization: Customization{
			ExtraKernelArgs:  []string{"net.ifnames=0", "console=ttyS0"},
			Meta:             []MetaValue{{Key: 10, Value: "hello"}},
			SystemExtensions: SystemExtensions{OfficialExtensions: []string{"siderolabs/iscsi-tools"}},
		},
	}
	data, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `overlay:
    image: siderolabs/sbc-raspberrypi
    name: rpi_generic
customization:
    extraKernelArgs:
        - net.ifnames=0
        - console=ttyS0
    meta:
        - key: 10
          value: hello
    systemExtensions:
        officialExtensions:
            - siderolabs/iscsi-tools
`
	if string(data) != want {
		t.Fatalf("canonical form:\n%s\nwant:\n%s", data, want)
	}
	// The order of extensions is part of the schematic: another order is another ID.
	a, _ := Schematic{Customization: Customization{SystemExtensions: SystemExtensions{OfficialExtensions: []string{"siderolabs/a", "siderolabs/b"}}}}.ID()
	b, _ := Schematic{Customization: Customization{SystemExtensions: SystemExtensions{OfficialExtensions: []string{"siderolabs/b", "siderolabs/a"}}}}.ID()
	if a == b {
		t.Fatal("two orders of extensions gave one ID")
	}
}

func TestImageReferences(t *testing.T) {
	f := Factory{Registry: "factory.example.com", URL: "https://factory.example.com/"}
	id := EmptyID
	for got, want := range map[string]string{
		f.Installer(id, "v1.14.1", false):             "factory.example.com/installer/" + id + ":v1.14.1",
		f.Installer(id, "v1.14.1", true):              "factory.example.com/installer-secureboot/" + id + ":v1.14.1",
		f.Image(id, "v1.14.1", "metal-amd64.iso"):     "https://factory.example.com/image/" + id + "/v1.14.1/metal-amd64.iso",
		f.PXE(id, "v1.14.1", "metal", "amd64"):        "https://factory.example.com/pxe/" + id + "/v1.14.1/metal-amd64",
		f.Image(id, "v1.14.1", "metal-amd64.raw.zst"): "https://factory.example.com/image/" + id + "/v1.14.1/metal-amd64.raw.zst",
	} {
		if got != want {
			t.Errorf("%s, want %s", got, want)
		}
	}
}

// TestMedia pins the factory's names for what boots a schematic.
func TestMedia(t *testing.T) {
	f := Factory{URL: "https://factory.test/", Registry: "factory.test"}
	var got []string
	for _, m := range f.Media("abc", "v1.14.1", "arm64", false) {
		got = append(got, m.Name+" "+m.Ref)
	}
	want := []string{
		"iso https://factory.test/image/abc/v1.14.1/metal-arm64.iso",
		"disk-image https://factory.test/image/abc/v1.14.1/metal-arm64.raw.zst",
		"pxe https://factory.test/pxe/abc/v1.14.1/metal-arm64",
		"kernel https://factory.test/image/abc/v1.14.1/kernel-arm64",
		"initramfs https://factory.test/image/abc/v1.14.1/initramfs-arm64.xz",
		"installer factory.test/installer/abc:v1.14.1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("media:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	sb := f.Media("abc", "v1.14.1", "amd64", true)
	if len(sb) != 3 || sb[0].Ref != "https://factory.test/image/abc/v1.14.1/metal-amd64-secureboot.iso" || sb[2].Ref != "factory.test/installer-secureboot/abc:v1.14.1" {
		t.Errorf("SecureBoot media: %+v", sb)
	}
}

func TestParseInstaller(t *testing.T) {
	for _, f := range []Factory{{Registry: "factory.test", URL: "https://factory.test"}, {Registry: "mirror.test:5000", URL: "https://factory.test"}} {
		for _, sb := range []bool{false, true} {
			ref := f.Installer("abc", "v1.14.1", sb)
			got, id, version, secureBoot, err := ParseInstaller(ref, f.URL)
			if err != nil || got != f || id != "abc" || version != "v1.14.1" || secureBoot != sb {
				t.Errorf("ParseInstaller(%q) = %+v %q %q %v %v", ref, got, id, version, secureBoot, err)
			}
		}
	}
	for _, bad := range []string{"factory.test/installer/abc", "mirror.test:5000/siderolabs/installer:v1.14.1", "factory.test/installer/a/b:v1"} {
		if _, _, _, _, err := ParseInstaller(bad, "https://x"); err == nil {
			t.Errorf("ParseInstaller(%q) succeeded", bad)
		}
	}
}
