package render

import (
	"errors"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/schematic"
)

func TestInstallerFor(t *testing.T) {
	factory := &ichorv1alpha1.ImageFactory{URL: "https://factory.test"}
	mirror := &ichorv1alpha1.ImageFactory{URL: "https://factory.test", Registry: "mirror.test:5000"}
	iscsi := &ichorv1alpha1.Schematic{SystemExtensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}}
	const iscsiID = "613e1592b2da41ae5e265e8789429f22e121aab91cb4deb6bc3c0b6262961245" // the factory's own ID for it
	for _, tc := range []struct {
		name         string
		cluster      func(*ichorv1alpha1.TalosCluster)
		machine      func(*ichorv1alpha1.TalosMachine)
		factory      *ichorv1alpha1.ImageFactory
		installImage string
		want, id     string
	}{
		{name: "no factory: --install-image at the cluster's version", installImage: "mirror.test/siderolabs/installer",
			want: "mirror.test/siderolabs/installer:v1.13.0"},
		{name: "neither: machinery's default"},
		{name: "a factory without a schematic: the stock image's", factory: factory, installImage: "ignored.test/installer",
			want: "factory.test/installer/" + schematic.EmptyID + ":v1.13.0", id: schematic.EmptyID},
		{name: "the cluster's schematic, from the factory's mirror", factory: mirror,
			cluster: func(c *ichorv1alpha1.TalosCluster) { c.Spec.Schematic = iscsi },
			want:    "mirror.test:5000/installer/" + iscsiID + ":v1.13.0", id: iscsiID},
		{name: "the machine's own schematic wins", factory: factory,
			cluster: func(c *ichorv1alpha1.TalosCluster) { c.Spec.Schematic = iscsi },
			machine: func(m *ichorv1alpha1.TalosMachine) { m.Spec.Schematic = &ichorv1alpha1.Schematic{} },
			want:    "factory.test/installer/" + schematic.EmptyID + ":v1.13.0", id: schematic.EmptyID},
		{name: "a node that booted SecureBoot gets the SecureBoot installer", factory: factory,
			machine: func(m *ichorv1alpha1.TalosMachine) {
				m.Status.Security = &ichorv1alpha1.MachineSecurityStatus{SecureBoot: true, BootedWithUKI: true}
			},
			want: "factory.test/installer-secureboot/" + schematic.EmptyID + ":v1.13.0", id: schematic.EmptyID},
		{name: "the cluster's SecureBoot installer wins over all", factory: factory, installImage: "x.test/installer",
			cluster: func(c *ichorv1alpha1.TalosCluster) {
				c.Spec.Security.SecureBoot.InstallerImage = "own.test/installer-secureboot/abc"
				c.Status.TalosVersion = "v1.13.5"
			},
			want: "own.test/installer-secureboot/abc:v1.13.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, m := testCluster(), testMachine("m", ichorv1alpha1.MachineRoleWorker, nil)
			if tc.cluster != nil {
				tc.cluster(c)
			}
			if tc.machine != nil {
				tc.machine(m)
			}
			got, err := InstallerFor(c, m, tc.factory, tc.installImage)
			if err != nil {
				t.Fatal(err)
			}
			if got.Image != tc.want || got.SchematicID != tc.id {
				t.Errorf("got %+v, want %s (%s)", got, tc.want, tc.id)
			}
		})
	}

	// A schematic needs a factory: the render fails naming the field and what to set.
	c, m := testCluster(), testMachine("m", ichorv1alpha1.MachineRoleWorker, nil)
	m.Spec.Schematic = iscsi
	_, err := Render(Input{Cluster: c, Machine: m, Secrets: testBundle(t), InstallImage: "x.test/installer"})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Field != "TalosMachine.spec.schematic" || !strings.Contains(err.Error(), "spec.settings.imageFactory") {
		t.Errorf("a schematic without a factory: %v", err)
	}
}

// TestRenderedInstallerInEitherLayout: the factory's installer is where
// each contract reads it (machine.install.image up to v1.13,
// UnattendedInstallConfig from v1.14), and InstallerImage reads it back.
func TestRenderedInstallerInEitherLayout(t *testing.T) {
	for _, version := range []string{"v1.13.0", "v1.14.1"} {
		c := testCluster()
		c.Spec.TalosVersion = version
		c.Spec.Schematic = &ichorv1alpha1.Schematic{ExtraKernelArgs: []string{"console=ttyS0"}}
		r, err := Render(Input{Cluster: c, Machine: testMachine("m", ichorv1alpha1.MachineRoleWorker, nil), Secrets: testBundle(t),
			ImageFactory: &ichorv1alpha1.ImageFactory{URL: "https://factory.test"}})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configloader.NewFromBytes(r.Config)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := schematic.Of(c.Spec.Schematic)
		id, _ := s.ID()
		if got, want := InstallerImage(cfg), "factory.test/installer/"+id+":"+version; got != want {
			t.Errorf("%s: installer %q, want %q", version, got, want)
		}
		if want := "v" + strings.Join(strings.Split(strings.TrimPrefix(version, "v"), ".")[:2], "."); r.Contract != want {
			t.Errorf("%s: contract %q, want %q", version, r.Contract, want)
		}
	}
}
