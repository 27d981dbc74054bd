package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

func TestRenderIsDeterministic(t *testing.T) {
	patches := func() []ichorv1alpha1.TalosConfigPatch {
		return []ichorv1alpha1.TalosConfigPatch{
			testPatch("labels", 0, ichorv1alpha1.PatchTarget{}, nodeLabelPatch("gold")),
			testPatch("sysctl", 0, ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.MachineRoleControlPlane},
				"machine:\n  sysctls:\n    net.core.somaxconn: \"65535\"\n"),
		}
	}
	for _, role := range []ichorv1alpha1.MachineRole{ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.MachineRoleWorker} {
		t.Run(string(role), func(t *testing.T) {
			first, err := Render(testInput(t, testMachine("node-1", role, nil), patches()...))
			if err != nil {
				t.Fatalf("first render: %v", err)
			}
			reversed := patches()
			slices.Reverse(reversed)
			second, err := Render(testInput(t, testMachine("node-1", role, nil), reversed...))
			if err != nil {
				t.Fatalf("second render: %v", err)
			}
			if !bytes.Equal(first.Config, second.Config) {
				t.Fatalf("two renders of the same inputs differ:\n%s\n---\n%s", first.Config, second.Config)
			}
			if first.Hash != second.Hash {
				t.Fatalf("hashes differ: %s != %s", first.Hash, second.Hash)
			}
			sum := sha256.Sum256(first.Config)
			if want := hex.EncodeToString(sum[:]); first.Hash != want {
				t.Fatalf("hash %s is not the SHA-256 of the config (%s)", first.Hash, want)
			}

			cfg, err := configloader.NewFromBytes(first.Config)
			if err != nil {
				t.Fatalf("rendered config does not load: %v", err)
			}
			if got, want := cfg.Machine().Type().String(), string(role); got != want {
				t.Errorf("machine type %q, want %q", got, want)
			}
			if got := cfg.K8sClusterConfig().ClusterName(); got != "prod" {
				t.Errorf("cluster name %q, want prod", got)
			}
			if got := cfg.Machine().Install().Disk(); got != "/dev/sda" {
				t.Errorf("install disk %q, want /dev/sda", got)
			}
			if !bytes.Contains(first.Config, []byte("hostname: node-1")) {
				t.Errorf("hostname node-1 not in config:\n%s", first.Config)
			}
			if bytes.Contains(first.Config, []byte("auto: stable")) {
				t.Errorf("a fixed hostname must replace auto: stable")
			}
		})
	}
}

func TestRenderClusterInputs(t *testing.T) {
	in := testInput(t, testMachine("cp-1", ichorv1alpha1.MachineRoleControlPlane, nil))
	in.Cluster.Spec.Network = ichorv1alpha1.ClusterNetwork{
		PodCIDRs:     []string{"10.100.0.0/16"},
		ServiceCIDRs: []string{"10.200.0.0/16"},
		DNSDomain:    "prod.internal",
		CNI:          ichorv1alpha1.CNISpec{Name: ichorv1alpha1.CNICilium},
	}
	in.Cluster.Spec.Security.KubeletServingCertificates.Enabled = true
	in.InstallImage = "siderolabs/installer:v1.13.0"

	out, err := Render(in)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	cfg, err := configloader.NewFromBytes(out.Config)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	prefixes := func(ps []netip.Prefix) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.String())
		}
		return out
	}
	network := cfg.K8sNetworkConfig()
	if got := prefixes(network.PodCIDRs()); !slices.Equal(got, []string{"10.100.0.0/16"}) {
		t.Errorf("pod CIDRs %v", got)
	}
	if got := prefixes(network.ServiceCIDRs()); !slices.Equal(got, []string{"10.200.0.0/16"}) {
		t.Errorf("service CIDRs %v", got)
	}
	if got := network.DNSDomain(); got != "prod.internal" {
		t.Errorf("DNS domain %q", got)
	}
	if cni := cfg.RawV1Alpha1().ClusterConfig.ClusterNetwork.CNI; cni == nil || cni.CNIName != "none" { //nolint:staticcheck // the v1.13 layout
		t.Errorf("CNI %+v, want none for cilium (Ichor installs it)", cni)
	}
	if got := cfg.K8sKubeletConfig().ExtraConfig()["serverTLSBootstrap"]; got != true {
		t.Errorf("kubelet extraConfig.serverTLSBootstrap = %v, want true", got)
	}
	if _, ok := cfg.K8sKubeletConfig().ExtraArgs()["rotate-server-certificates"]; ok {
		t.Error("the deprecated rotate-server-certificates flag is rendered")
	}
	if got := cfg.Machine().Install().Image(); got != "siderolabs/installer:v1.13.0" {
		t.Errorf("install image %q", got)
	}
	if got := cfg.K8sClusterConfig().ClusterEndpoint().String(); got != "https://10.5.0.2:6443" {
		t.Errorf("endpoint %q", got)
	}
}

func TestRenderPatchOrder(t *testing.T) {
	all := ichorv1alpha1.PatchTarget{}
	workers := ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.MachineRoleWorker}
	controlPlanes := ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.MachineRoleControlPlane}
	byName := ichorv1alpha1.PatchTarget{Machines: []string{"node-1"}}
	gpu := ichorv1alpha1.PatchTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"gpu": "yes"}}}
	ssd := ichorv1alpha1.PatchTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"disk": "ssd"}}}

	disabled := testPatch("z-disabled", 99, all, nodeLabelPatch("disabled"))
	disabled.Spec.Disabled = true
	otherCluster := testPatch("z-other-cluster", 99, all, nodeLabelPatch("other"))
	otherCluster.Spec.ClusterName = "staging"
	otherNamespace := testPatch("z-other-namespace", 99, all, nodeLabelPatch("other"))
	otherNamespace.Namespace = "team-b"

	cases := []struct {
		name    string
		patches []ichorv1alpha1.TalosConfigPatch
		want    string   // value of the tier node label
		applied []string // patch names in application order
	}{
		{
			name: "higher priority applies later and wins",
			patches: []ichorv1alpha1.TalosConfigPatch{
				testPatch("a", 10, all, nodeLabelPatch("ten")),
				testPatch("b", 5, all, nodeLabelPatch("five")),
			},
			want: "ten", applied: []string{"b", "a"},
		},
		{
			name: "equal priority orders by name",
			patches: []ichorv1alpha1.TalosConfigPatch{
				testPatch("b", 0, all, nodeLabelPatch("b")),
				testPatch("a", 0, all, nodeLabelPatch("a")),
			},
			want: "b", applied: []string{"a", "b"},
		},
		{
			name: "cluster then role then machine, whatever the priority",
			patches: []ichorv1alpha1.TalosConfigPatch{
				testPatch("machine", -100, byName, nodeLabelPatch("machine")),
				testPatch("cluster", 100, all, nodeLabelPatch("cluster")),
				testPatch("role", 50, workers, nodeLabelPatch("role")),
			},
			want: "machine", applied: []string{"cluster", "role", "machine"},
		},
		{
			name: "selector is machine scope",
			patches: []ichorv1alpha1.TalosConfigPatch{
				testPatch("by-label", 0, gpu, nodeLabelPatch("gpu")),
				testPatch("role", 9, workers, nodeLabelPatch("role")),
			},
			want: "gpu", applied: []string{"role", "by-label"},
		},
		{
			name: "other role, other machines, non-matching selector are skipped",
			patches: []ichorv1alpha1.TalosConfigPatch{
				testPatch("base", 0, all, nodeLabelPatch("base")),
				testPatch("cp", 0, controlPlanes, nodeLabelPatch("cp")),
				testPatch("node-2", 0, ichorv1alpha1.PatchTarget{Machines: []string{"node-2"}}, nodeLabelPatch("n2")),
				testPatch("ssd", 0, ssd, nodeLabelPatch("ssd")),
			},
			want: "base", applied: []string{"base"},
		},
		{
			name: "disabled, other cluster and other namespace are skipped",
			patches: []ichorv1alpha1.TalosConfigPatch{
				testPatch("base", 0, all, nodeLabelPatch("base")),
				disabled, otherCluster, otherNamespace,
			},
			want: "base", applied: []string{"base"},
		},
		{
			name: "JSON6902 as JSON",
			patches: []ichorv1alpha1.TalosConfigPatch{
				testPatch("a-strategic", 0, all, nodeLabelPatch("strategic")),
				testPatch("b-json", 0, all, `[{"op": "replace", "path": "/machine/nodeLabels/tier", "value": "json"}]`),
			},
			want: "json", applied: []string{"a-strategic", "b-json"},
		},
		{
			name: "JSON6902 as YAML, then strategic merge over it",
			patches: []ichorv1alpha1.TalosConfigPatch{
				testPatch("a-json", 0, all, "- op: add\n  path: /machine/nodeLabels\n  value:\n    tier: yaml-json\n"),
				testPatch("b-strategic", 0, all, nodeLabelPatch("strategic")),
			},
			want: "strategic", applied: []string{"a-json", "b-strategic"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := testMachine("node-1", ichorv1alpha1.MachineRoleWorker, map[string]string{"gpu": "yes"})
			out, err := Render(testInput(t, m, tc.patches...))
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			cfg, err := configloader.NewFromBytes(out.Config)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if got := cfg.K8sNodeConfig().Labels()["tier"]; got != tc.want {
				t.Errorf("tier label %q, want %q", got, tc.want)
			}
			var applied []string
			for _, a := range out.Applied {
				applied = append(applied, a.Patch.Name)
			}
			if !slices.Equal(applied, tc.applied) {
				t.Errorf("applied %v, want %v", applied, tc.applied)
			}
			if !bytes.Contains(out.Config, []byte("hostname: node-1")) {
				t.Errorf("the hostname document must survive patching:\n%s", out.Config)
			}
		})
	}
}

func TestRenderRefusesBadPatches(t *testing.T) {
	good := testPatch("a-good", 0, ichorv1alpha1.PatchTarget{}, nodeLabelPatch("fine"))
	later := testPatch("z-later", 0, ichorv1alpha1.PatchTarget{}, nodeLabelPatch("later"))
	twoTargets := testPatch("two-targets", 0, ichorv1alpha1.PatchTarget{
		Role: ichorv1alpha1.MachineRoleWorker, Machines: []string{"node-1"},
	}, nodeLabelPatch("x"))
	badSelector := testPatch("bad-selector", 0, ichorv1alpha1.PatchTarget{Selector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "gpu", Operator: "Sometimes"}},
	}}, nodeLabelPatch("x"))

	cases := []struct {
		name         string
		talosVersion string // default testTalosVersion
		patches      []ichorv1alpha1.TalosConfigPatch
		blame        string
		reason       PatchFailure
		message      string // part of the error text
	}{
		{
			name:    "not YAML",
			patches: []ichorv1alpha1.TalosConfigPatch{good, testPatch("broken", 0, ichorv1alpha1.PatchTarget{}, "machine: [unclosed\n")},
			blame:   "broken", reason: PatchParseFailed,
		},
		{
			name:    "unknown field",
			patches: []ichorv1alpha1.TalosConfigPatch{good, testPatch("typo", 0, ichorv1alpha1.PatchTarget{}, "machine:\n  kubelett: {}\n")},
			blame:   "typo", reason: PatchParseFailed, message: "kubelett",
		},
		{
			name: "JSON6902 on a missing path",
			patches: []ichorv1alpha1.TalosConfigPatch{good, testPatch("missing", 0, ichorv1alpha1.PatchTarget{},
				`[{"op": "remove", "path": "/machine/nothingHere"}]`)},
			blame: "missing", reason: PatchApplyFailed,
		},
		{
			name: "valid patch, invalid result",
			patches: []ichorv1alpha1.TalosConfigPatch{good, later, testPatch("m-auto-hostname", 0, ichorv1alpha1.PatchTarget{},
				"apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n")},
			blame: "m-auto-hostname", reason: PatchInvalidResult,
			message: "'auto' and 'hostname' cannot be set at the same time",
		},
		{
			name:         "a v1.13-layout field on a v1.14 contract names the documents to patch",
			talosVersion: "v1.14.0",
			patches: []ichorv1alpha1.TalosConfigPatch{testPatch("node-ip", 0, ichorv1alpha1.PatchTarget{},
				"machine:\n  kubelet:\n    nodeIP:\n      validSubnets: [10.5.0.0/24]\n"), later},
			blame: "node-ip", reason: PatchInvalidResult,
			message: "configures it in the KubeNodeConfig, KubeletConfig document: patch that instead",
		},
		{
			name: "a v1.14 document on a v1.13 contract",
			patches: []ichorv1alpha1.TalosConfigPatch{good, testPatch("kubelet-doc", 0, ichorv1alpha1.PatchTarget{},
				"apiVersion: v1alpha1\nkind: KubeletConfig\nclusterDNS: [10.96.0.53]\n")},
			blame: "kubelet-doc", reason: PatchInvalidResult,
			message: "the KubeletConfig document exists from Talos v1.14 on, and this cluster's version contract is v1.13",
		},
		{
			name:    "two kinds of target",
			patches: []ichorv1alpha1.TalosConfigPatch{good, twoTargets},
			blame:   "two-targets", reason: PatchInvalidTarget,
		},
		{
			name:    "bad selector",
			patches: []ichorv1alpha1.TalosConfigPatch{good, badSelector},
			blame:   "bad-selector", reason: PatchInvalidTarget,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := testInput(t, testMachine("node-1", ichorv1alpha1.MachineRoleWorker, nil), tc.patches...)
			if tc.talosVersion != "" {
				in.Cluster.Spec.TalosVersion = tc.talosVersion
			}
			out, err := Render(in)
			if err == nil {
				t.Fatalf("render succeeded, want an error naming %s", tc.blame)
			}
			if out.Config != nil || out.Hash != "" || out.Applied != nil {
				t.Errorf("a failed render returned output: %+v", out)
			}
			var pe *PatchError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *PatchError", err)
			}
			if want := (types.NamespacedName{Namespace: testNamespace, Name: tc.blame}); pe.Patch != want {
				t.Errorf("blamed %s, want %s (error: %v)", pe.Patch, want, err)
			}
			if pe.Reason != tc.reason {
				t.Errorf("reason %s, want %s (error: %v)", pe.Reason, tc.reason, err)
			}
			if !strings.Contains(err.Error(), testNamespace+"/"+tc.blame) || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not name %s/%s and say %q", err, testNamespace, tc.blame, tc.message)
			}
		})
	}
}

func TestRenderRefusesBadInputs(t *testing.T) {
	cases := []struct {
		name    string
		change  func(*Input)
		field   string
		message string
	}{
		{
			name:    "Kubernetes too new for Talos",
			change:  func(in *Input) { in.Cluster.Spec.KubernetesVersion = "v1.37.2" },
			field:   "TalosCluster.spec.kubernetesVersion",
			message: "Kubernetes v1.37.2 cannot run on Talos v1.13.0: version of Kubernetes 1.37.2 is too new to be used with Talos 1.13.0",
		},
		{
			name:    "Talos unknown to machinery",
			change:  func(in *Input) { in.Cluster.Spec.TalosVersion = "v1.99.0" },
			field:   "TalosCluster.spec.kubernetesVersion",
			message: "not supported",
		},
		{
			name: "Kubernetes too old for Talos v1.14",
			change: func(in *Input) {
				in.Cluster.Spec.TalosVersion, in.Cluster.Spec.KubernetesVersion = "v1.14.0", "v1.31.4"
			},
			field:   "TalosCluster.spec.kubernetesVersion",
			message: "Kubernetes v1.31.4 cannot run on Talos v1.14.0: version of Kubernetes 1.31.4 is too old to be used with Talos 1.14.0",
		},
		{
			name: "Kubernetes too new for Talos v1.14",
			change: func(in *Input) {
				in.Cluster.Spec.TalosVersion, in.Cluster.Spec.KubernetesVersion = "v1.14.0", "v1.38.0"
			},
			field:   "TalosCluster.spec.kubernetesVersion",
			message: "version of Kubernetes 1.38.0 is too new to be used with Talos 1.14.0",
		},
		{
			name:    "endpoint not https",
			change:  func(in *Input) { in.Cluster.Spec.ControlPlane.Endpoint = "http://10.5.0.2:6443" },
			field:   "TalosCluster.spec.controlPlane.endpoint",
			message: "not an https URL",
		},
		{
			name:    "no install disk",
			change:  func(in *Input) { in.Machine.Spec.Install.Disk = "" },
			field:   "TalosMachine.spec.install.disk",
			message: "no install disk",
		},
		{
			name:    "unknown CNI",
			change:  func(in *Input) { in.Cluster.Spec.Network.CNI.Name = "weave" },
			field:   "TalosCluster.spec.network.cni.name",
			message: `unknown CNI "weave"`,
		},
		{
			name:    "no secrets bundle",
			change:  func(in *Input) { in.Secrets = nil },
			field:   "TalosCluster.spec.secretsRef",
			message: "no secrets bundle",
		},
		{
			name:    "generated config invalid",
			change:  func(in *Input) { in.Machine.Spec.Hostname = strings.Repeat("x", 300) },
			field:   "TalosCluster.spec/TalosMachine.spec",
			message: "invalid before any patch",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := testInput(t, testMachine("node-1", ichorv1alpha1.MachineRoleControlPlane, nil))
			tc.change(&in)
			out, err := Render(in)
			if err == nil {
				t.Fatal("render succeeded")
			}
			if out.Config != nil {
				t.Errorf("a failed render returned a config")
			}
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v is not an *InputError", err)
			}
			if ie.Field != tc.field || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q (field %s), want field %s and %q", err, ie.Field, tc.field, tc.message)
			}
		})
	}
}

// TestKubeletServingOptionOnlyAddsServerTLSBootstrap checks, at both version
// contract families, that the kubelet serving option changes nothing while it
// is off (existing clusters keep their bytes), and when on adds
// serverTLSBootstrap where that contract's kubelet reads it, and nothing else.
func TestKubeletServingOptionOnlyAddsServerTLSBootstrap(t *testing.T) {
	families := []struct {
		talosVersion string
		path         string // where serverTLSBootstrap goes
	}{
		{"v1.13.0", "machine.kubelet.extraConfig.serverTLSBootstrap"},
		{"v1.14.0", "KubeletConfig:config.serverTLSBootstrap"},
	}
	for _, family := range families {
		for _, role := range []ichorv1alpha1.MachineRole{ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.MachineRoleWorker} {
			t.Run(family.talosVersion+"/"+string(role), func(t *testing.T) {
				in := testInput(t, testMachine("node-1", role, nil))
				in.Cluster.Spec.TalosVersion = family.talosVersion
				off, err := Render(in)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Contains(off.Config, []byte("serverTLSBootstrap")) || bytes.Contains(off.Config, []byte("rotate-server-certificates")) {
					t.Fatal("the option is off but the config asks for serving certificates")
				}

				// The same inputs with the option spelled out as off render the same bytes.
				in.Cluster = in.Cluster.DeepCopy()
				in.Cluster.Spec.Security.KubeletServingCertificates.Enabled = false
				in.Cluster.Spec.Security.KubeletServingCertificates.VerifyFromAPIServer = false
				again, err := Render(in)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(off.Config, again.Config) {
					t.Fatal("an explicitly disabled option changed the rendered bytes")
				}

				in.Cluster.Spec.Security.KubeletServingCertificates.Enabled = true
				on, err := Render(in)
				if err != nil {
					t.Fatal(err)
				}
				effect, changes, err := Classify(off.Config, on.Config, ApplyWithReboot)
				if err != nil {
					t.Fatal(err)
				}
				if len(changes) != 1 || changes[0].Path != family.path || effect != ichorv1alpha1.ConfigEffectNoReboot {
					t.Fatalf("enabling the option changed %+v (effect %s), want only %s, no reboot", changes, effect, family.path)
				}
				if bytes.Contains(on.Config, []byte("rotate-server-certificates")) {
					t.Fatal("the deprecated kubelet flag was rendered")
				}
			})
		}
	}
}

// TestKubeletDocumentFromV1_14 checks the layout of the v1.14 contract family:
// the kubelet's settings, patches to machine.kubelet included, are in the
// KubeletConfig document and machine.kubelet is gone, in a config a node
// loads and validates.
func TestKubeletDocumentFromV1_14(t *testing.T) {
	patch := testPatch("kubelet-args", 0, ichorv1alpha1.PatchTarget{},
		"apiVersion: v1alpha1\nkind: KubeletConfig\nextraArgs:\n  max-pods: \"250\"\nclusterDNS: [10.96.0.53]\n")
	in := testInput(t, testMachine("node-1", ichorv1alpha1.MachineRoleWorker, nil), patch)
	in.Cluster.Spec.TalosVersion = "v1.14.0"
	in.Cluster.Spec.Security.KubeletServingCertificates.Enabled = true
	out, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := configloader.NewFromBytes(out.Config)
	if err != nil {
		t.Fatalf("the rendered config does not load: %v", err)
	}
	if _, err := cfg.Validate(metalMode{}); err != nil {
		t.Fatalf("the rendered config is invalid: %v", err)
	}
	if cfg.RawV1Alpha1().MachineConfig.MachineKubelet != nil { //nolint:staticcheck // checks the v1.13 field is unset
		t.Fatal("machine.kubelet is still set beside the KubeletConfig document")
	}
	var doc *k8s.KubeletConfigV1Alpha1
	for _, d := range cfg.Documents() {
		if k, ok := d.(*k8s.KubeletConfigV1Alpha1); ok {
			doc = k
		}
	}
	if doc == nil {
		t.Fatalf("no KubeletConfig document in\n%s", out.Config)
	}
	if want := constants.KubeletImage + ":" + testKubernetesVersion; doc.KubeletImage != want {
		t.Errorf("image %q, want %q", doc.KubeletImage, want)
	}
	if doc.KubeletConfig.Object["serverTLSBootstrap"] != true {
		t.Errorf("config %v has no serverTLSBootstrap", doc.KubeletConfig.Object)
	}
	if got := doc.KubeletArgs.ToMap()["max-pods"]; !slices.Equal(got, []string{"250"}) || !slices.Equal(doc.KubeletClusterDNS, []string{"10.96.0.53"}) {
		t.Errorf("the patch did not reach the document: extraArgs %v, clusterDNS %v", doc.KubeletArgs.ToMap(), doc.KubeletClusterDNS)
	}

	// The v1.13 family keeps machine.kubelet and has no KubeletConfig
	// document: the same settings patch machine.kubelet there.
	in.Cluster.Spec.TalosVersion = "v1.13.0"
	in.Patches = []ichorv1alpha1.TalosConfigPatch{testPatch("kubelet-args", 0, ichorv1alpha1.PatchTarget{},
		"machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"250\"\n    clusterDNS: [10.96.0.53]\n")}
	legacy, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(legacy.Config, []byte("kind: KubeletConfig")) || !bytes.Contains(legacy.Config, []byte("max-pods")) {
		t.Fatalf("v1.13 layout changed:\n%s", legacy.Config)
	}
}

// TestKubeletCertificateAuthorityWaitsForTheLatch checks that
// verifyFromAPIServer renders --kubelet-certificate-authority on control
// planes only once the KubeletServingVerified latch is set, and then as an
// API server restart.
func TestKubeletCertificateAuthorityWaitsForTheLatch(t *testing.T) {
	for _, role := range []ichorv1alpha1.MachineRole{ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.MachineRoleWorker} {
		t.Run(string(role), func(t *testing.T) {
			in := testInput(t, testMachine("node-1", role, nil))
			in.Cluster = in.Cluster.DeepCopy()
			in.Cluster.Spec.Security.KubeletServingCertificates.Enabled = true
			in.Cluster.Spec.Security.KubeletServingCertificates.VerifyFromAPIServer = true
			before, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(before.Config, []byte("kubelet-certificate-authority")) {
				t.Fatal("rendered before the latch")
			}
			in.Cluster.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.ClusterConditionKubeletServingVerified, Status: metav1.ConditionTrue}}
			after, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			effect, changes, err := Classify(before.Config, after.Config, ApplyWithReboot)
			if err != nil {
				t.Fatal(err)
			}
			if role == ichorv1alpha1.MachineRoleWorker {
				if len(changes) != 0 {
					t.Fatalf("a worker's config changed: %+v", changes)
				}
				return
			}
			if len(changes) != 1 || changes[0].Path != "cluster.apiServer.extraArgs.kubelet-certificate-authority" || effect != ichorv1alpha1.ConfigEffectAPIServerRestart ||
				!bytes.Contains(after.Config, []byte("kubelet-certificate-authority: /system/secrets/kubernetes/kube-apiserver/ca.crt")) {
				t.Fatalf("the latch changed %+v (effect %s)", changes, effect)
			}
		})
	}
}

// TestRenderInstallerImage: the cluster's SecureBoot installer wins over
// the controller's, at the cluster's Talos version.
func TestRenderInstallerImage(t *testing.T) {
	in := testInput(t, testMachine("w-1", ichorv1alpha1.MachineRoleWorker, nil))
	in.InstallImage = "siderolabs/installer"
	for _, tc := range []struct{ cluster, want string }{
		{"", "siderolabs/installer:v1.13.0"},
		{"factory.example/installer-secureboot/abc", "factory.example/installer-secureboot/abc:v1.13.0"},
	} {
		in.Cluster.Spec.Security.SecureBoot.InstallerImage = tc.cluster
		out, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configloader.NewFromBytes(out.Config)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Machine().Install().Image(); got != tc.want {
			t.Errorf("cluster installer %q: machine.install.image %q, want %q", tc.cluster, got, tc.want)
		}
	}
}

// TestRenderTalosTrust: machine.ca is the bundle's Talos API CA in force
// (its key on control planes only), machine.acceptedCAs the CAs accepted
// beside it, and a change of either is a no-reboot change.
func TestRenderTalosTrust(t *testing.T) {
	for _, role := range []ichorv1alpha1.MachineRole{ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.MachineRoleWorker} {
		in := testInput(t, testMachine("m-1", role, nil))
		before, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		next, err := secrets.NewTalosCA(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		in.TalosAcceptedCAs = [][]byte{next.CrtPEM}
		after, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configloader.NewFromBytes(after.Config)
		if err != nil {
			t.Fatal(err)
		}
		sec := cfg.Machine().Security()
		if len(sec.AcceptedCAs()) != 1 || string(sec.AcceptedCAs()[0].Crt) != string(next.CrtPEM) ||
			string(sec.IssuingCA().Crt) != string(in.Secrets.Certs.OS.Crt) {
			t.Errorf("%s: machine.acceptedCAs %d, issuing from the bundle %v", role, len(sec.AcceptedCAs()),
				string(sec.IssuingCA().Crt) == string(in.Secrets.Certs.OS.Crt))
		}
		if hasKey := len(sec.IssuingCA().Key) > 0; hasKey != (role == ichorv1alpha1.MachineRoleControlPlane) {
			t.Errorf("%s: machine.ca carries its key: %v", role, hasKey)
		}
		effect, _, err := Classify(before.Config, after.Config, ApplyWithReboot)
		if err != nil || effect != ichorv1alpha1.ConfigEffectNoReboot {
			t.Errorf("%s: accepting a CA is %s, %v; want NoReboot", role, effect, err)
		}
	}
}

// TestRenderKubernetesTrust: the Kubernetes CAs accepted during a CA
// rotation come after the bundle's, which stays the issuing one (with its
// key on control planes only), in either layout: cluster.ca and
// cluster.acceptedCAs up to the v1.13 contract, KubeAPIServerCAConfig
// from v1.14 (a worker's holds the issuing CA as its first accepted one).
// The change restarts kube-apiserver on a control plane and nothing that
// takes a worker away.
func TestRenderKubernetesTrust(t *testing.T) {
	for _, c := range []struct {
		version string
		role    ichorv1alpha1.MachineRole
		want    ichorv1alpha1.ConfigEffect
	}{
		{"v1.13.0", ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.ConfigEffectAPIServerRestart},
		{"v1.13.0", ichorv1alpha1.MachineRoleWorker, ichorv1alpha1.ConfigEffectAPIServerRestart},
		{"v1.14.1", ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.ConfigEffectAPIServerRestart},
		{"v1.14.1", ichorv1alpha1.MachineRoleWorker, ichorv1alpha1.ConfigEffectAPIServerRestart},
	} {
		in := testInput(t, testMachine("m-1", c.role, nil))
		in.Cluster.Spec.TalosVersion = c.version
		before, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		next, err := secrets.NewKubernetesCA(time.Now(), talosconfig.TalosVersionCurrent)
		if err != nil {
			t.Fatal(err)
		}
		in.KubernetesAcceptedCAs = [][]byte{next.CrtPEM}
		after, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configloader.NewFromBytes(after.Config)
		if err != nil {
			t.Fatal(err)
		}
		// The accepted CAs begin with the issuing one.
		cl := cfg.K8sAPIServerCAConfig()
		if len(cl.AcceptedCAs()) != 2 || string(cl.AcceptedCAs()[1].Crt) != string(next.CrtPEM) || string(cl.AcceptedCAs()[0].Crt) != string(in.Secrets.Certs.K8s.Crt) {
			t.Errorf("%s %s: accepted CAs %d, issuing from the bundle %v", c.version, c.role, len(cl.AcceptedCAs()), string(cl.AcceptedCAs()[0].Crt) == string(in.Secrets.Certs.K8s.Crt))
		}
		// Only a control plane holds the issuing CA's key.
		if hasKey := cl.IssuingCA() != nil; hasKey != (c.role == ichorv1alpha1.MachineRoleControlPlane) {
			t.Errorf("%s: cluster.ca carries its key: %v", c.role, hasKey)
		}
		if len(cfg.Machine().Security().AcceptedCAs()) != 0 {
			t.Errorf("%s: machine.acceptedCAs set by a Kubernetes CA rotation", c.role)
		}
		effect, _, err := Classify(before.Config, after.Config, ApplyWithReboot)
		if err != nil || effect != c.want {
			t.Errorf("%s %s: accepting a Kubernetes CA is %s, %v; want %s", c.version, c.role, effect, err, c.want)
		}
	}
}
