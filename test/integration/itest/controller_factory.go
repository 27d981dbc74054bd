package itest

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"go.yaml.in/yaml/v4"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/schematic"
)

// The Image Factory the demo cluster's installers come from, once an admin
// names it. The simulated nodes pull any installer of a Talos version.
const (
	FactoryURL      = "https://factory.test"
	FactoryRegistry = "factory.test"
)

// ImageFactorySchematic: an admin gives the cluster a schematic, which no
// operator may, and it renders nowhere until an admin names an image
// factory; then every config names the factory's installer of it, a
// change each node takes without a reboot, the cluster's status.image and
// ImageReady say so, talosctl reads the installer in every node's config,
// and `ichor image-urls` shows a viewer the boot media. Clearing the
// schematic moves every config to the stock image's installer, again
// without a reboot.
func (d *DemoCluster) ImageFactorySchematic(t *testing.T) {
	ctx := d.Ctx
	rebootsBefore, before := d.Reboots(), d.AppliedHashes(t)
	RunIchor(ctx, t, nil, "olivia", "ichor:operator", "-n", d.Ns, "schematic", "demo", "--extension", "siderolabs/iscsi-tools").
		Fails(t, "an operator's schematic", "talosclusters/schematic")
	RunIchor(ctx, t, nil, "carol", "ichor:admin", "-n", d.Ns, "schematic", "demo", "--extension", "siderolabs/not a name").
		Fails(t, "a schematic with a bad extension name", "spec.schematic.systemExtensions[0]", "is not an extension name")
	RunIchor(ctx, t, nil, "carol", "ichor:admin", "-n", d.Ns, "schematic", "demo",
		"--extension", "siderolabs/iscsi-tools", "--extension", "siderolabs/util-linux-tools").Ok(t, "an admin's schematic", "schematic set")

	// No factory: nothing renders, and the cluster says what to set.
	c := WaitCluster(ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionImageReady, metav1.ConditionFalse, v1alpha1.ClusterReasonNoImageFactory)
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ClusterConditionImageReady); !strings.Contains(cond.Message, "spec.settings.imageFactory") {
		t.Errorf("ImageReady does not say what to set: %s", cond.Message)
	}
	for _, name := range d.Names {
		WaitMachine(ctx, t, d.Ns, name, "does not render without a factory", func(m *v1alpha1.TalosMachine) bool {
			return HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonRenderFailed)
		})
	}
	if got := d.AppliedHashes(t); !maps.Equal(got, before) {
		t.Fatalf("a config changed without a factory: %v -> %v", before, got)
	}

	// An admin names the factory with kubectl, as docs/operations.md shows,
	// for the rest of the test: taken back, it would roll out again under
	// later steps.
	installations := APIClient(d.Parent).IchorV1alpha1().IchorInstallations()
	d.Parent.Cleanup(func() {
		if in, err := installations.Get(context.Background(), v1alpha1.InstallationName, metav1.GetOptions{}); err == nil {
			in.Spec.Settings.ImageFactory = nil
			_, _ = installations.UpdateSettings(context.Background(), in.Name, in, metav1.UpdateOptions{})
		}
	})
	var inst map[string]any
	if err := json.Unmarshal([]byte(MustKubectl(ctx, t, append(Admin, "get", "ichorinstallation", "ichor", "-o", "json")...)), &inst); err != nil {
		t.Fatal(err)
	}
	inst["spec"].(map[string]any)["settings"].(map[string]any)["imageFactory"] = map[string]any{"url": FactoryURL, "registry": FactoryRegistry}
	body, err := json.Marshal(inst)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := CP.KubectlWithInput(ctx, body, append(Admin, "replace", "--raw", "/apis/ichor.dev/v1alpha1/ichorinstallations/ichor/settings", "-f", "-")...); err != nil {
		t.Fatalf("kubectl replace --raw …/settings: %v\n%s", err, out)
	}
	const iscsiID = "613e1592b2da41ae5e265e8789429f22e121aab91cb4deb6bc3c0b6262961245" // the factory's own ID of it
	installer := FactoryRegistry + "/installer/" + iscsiID + ":" + d.TalosVersion
	c = WaitCluster(ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionImageReady, metav1.ConditionTrue, v1alpha1.ClusterReasonFromFactory)
	if c.Status.Image == nil || c.Status.Image.SchematicID != iscsiID || c.Status.Image.Installer != installer || c.Status.Image.FactoryURL != FactoryURL {
		t.Errorf("status.image %+v, want schematic %s and installer %s", c.Status.Image, iscsiID, installer)
	}
	d.RolledOut(t, before)
	if got := d.Reboots(); !maps.Equal(got, rebootsBefore) {
		t.Errorf("naming the installer rebooted nodes: %v -> %v", rebootsBefore, got)
	}
	d.InstallersAre(t, installer)

	urls := RunIchor(ctx, t, nil, "victor", "ichor:viewer", "-n", d.Ns, "image-urls", "demo")
	urls.Ok(t, "ichor image-urls")
	for name, want := range map[string]string{"installer": installer, "iso": FactoryURL + "/image/" + iscsiID + "/" + d.TalosVersion + "/metal-amd64.iso",
		"pxe": FactoryURL + "/pxe/" + iscsiID + "/" + d.TalosVersion + "/metal-amd64"} {
		if !slices.ContainsFunc(strings.Split(urls.Stdout, "\n"), func(l string) bool { return slices.Equal(strings.Fields(l), []string{name, want}) }) {
			t.Errorf("ichor image-urls: no line %q %q in\n%s", name, want, urls.Stdout)
		}
	}

	before, rebootsBefore = d.AppliedHashes(t), d.Reboots()
	RunIchor(ctx, t, nil, "carol", "ichor:admin", "-n", d.Ns, "schematic", "demo", "--clear").Ok(t, "clearing the schematic")
	d.RolledOut(t, before)
	if got := d.Reboots(); !maps.Equal(got, rebootsBefore) {
		t.Errorf("a new schematic rebooted nodes: %v -> %v", rebootsBefore, got)
	}
	d.InstallersAre(t, FactoryRegistry+"/installer/"+schematic.EmptyID+":"+d.TalosVersion)
}

// InstallersAre checks, with talosctl, the installer every node's config names.
func (d *DemoCluster) InstallersAre(t *testing.T, want string) {
	t.Helper()
	talosconfig := d.AdminTalosconfig(t)
	for _, name := range d.Names {
		out, err := TalosctlOn(d.Ctx, t, d.Nodes[name])(talosconfig, "get", "machineconfig", "-o", "yaml")
		if err != nil {
			t.Fatalf("%s: talosctl get machineconfig: %v\n%s", name, err, out)
		}
		var res struct {
			Spec string `yaml:"spec"`
		}
		if err := yaml.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cfg, err := configloader.NewFromBytes([]byte(res.Spec))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := render.InstallerImage(cfg); got != want {
			t.Errorf("%s installs %q, want %q", name, got, want)
		}
	}
}

// SchematicUpgrade: the nodes booted an installer of no factory; their
// configs now name the factory's. An operator's talos-upgrade to the
// version they run installs it: each node reboots once, one control plane
// at a time, and then runs the factory's image, whose schematic talosctl
// reads on every node. Another such upgrade finds nothing to do.
func (d *DemoCluster) SchematicUpgrade(t *testing.T) {
	before, since := d.Reboots(), time.Now()
	spec := "clusterName: demo\ntype: talos-upgrade\ntalosUpgrade: {version: " + d.TalosVersion + "}"
	d.CreateOperation(t, Operator, "reinstall", spec)
	d.StartOperation(t, Operator, "reinstall")
	d.WaitOperationEnds(t, "reinstall", v1alpha1.OperationSucceeded)
	RebootedOnce(t, before, d.Reboots())
	if most, when := MostAwayAtOnce(d.ControlPlaneNodes(), since); most != 1 {
		t.Errorf("at most %d control planes were away at once (%s), want exactly 1", most, when)
	}
	talosconfig := d.AdminTalosconfig(t)
	for _, name := range d.Names {
		out, err := TalosctlOn(d.Ctx, t, d.Nodes[name])(talosconfig, "get", "imagefactoryschematic", "-o", "jsonpath={.spec.schematicId}")
		if err != nil || strings.TrimSpace(out) != schematic.EmptyID {
			t.Errorf("%s: talosctl get imagefactoryschematic: %q, %v; want %s", name, out, err, schematic.EmptyID)
		}
	}

	before = d.Reboots()
	d.CreateOperation(t, Operator, "reinstall-again", spec)
	d.StartOperation(t, Operator, "reinstall-again")
	op := d.WaitOperationEnds(t, "reinstall-again", v1alpha1.OperationSucceeded)
	if !maps.Equal(before, d.Reboots()) {
		t.Errorf("an upgrade to what the nodes run rebooted them: %v -> %v", before, d.Reboots())
	}
	for _, s := range op.Status.Steps {
		if !strings.Contains(s.Message, "runs Talos "+d.TalosVersion+" already") {
			t.Errorf("step %s: %s", s.Machine, s.Message)
		}
	}
}
