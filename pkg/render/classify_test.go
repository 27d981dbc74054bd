package render

import (
	"errors"
	"slices"
	"strings"
	"testing"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// renderWith renders node-1 in the given role with the patches, failing the test on error.
func renderWith(t *testing.T, role ichorv1alpha1.MachineRole, hostname string, patches ...string) []byte {
	t.Helper()
	m := testMachine("node-1", role, nil)
	m.Spec.Hostname = hostname
	var ps []ichorv1alpha1.TalosConfigPatch
	for i, p := range patches {
		ps = append(ps, testPatch(string(rune('a'+i)), 0, ichorv1alpha1.PatchTarget{}, p))
	}
	out, err := Render(testInput(t, m, ps...))
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return out.Config
}

func TestClassifyRenderedChanges(t *testing.T) {
	const (
		cp     = ichorv1alpha1.MachineRoleControlPlane
		worker = ichorv1alpha1.MachineRoleWorker
	)
	apiServerArg := "cluster:\n  apiServer:\n    extraArgs:\n      audit-log-maxage: \"7\"\n"
	cases := []struct {
		name     string
		role     ichorv1alpha1.MachineRole
		hostname string // of the new config; the old one is node-1
		patches  []string
		want     ichorv1alpha1.ConfigEffect
		paths    []string
	}{
		{name: "unchanged", role: cp, want: ichorv1alpha1.ConfigEffectNone},
		{name: "node label", role: worker, patches: []string{nodeLabelPatch("x")},
			want: ichorv1alpha1.ConfigEffectNoReboot, paths: []string{"machine.nodeLabels.tier"}},
		{name: "kubelet argument", role: worker, patches: []string{"machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"200\"\n"},
			want: ichorv1alpha1.ConfigEffectNoReboot, paths: []string{"machine.kubelet.extraArgs.max-pods"}},
		{name: "sysctl", role: worker, patches: []string{"machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"},
			want: ichorv1alpha1.ConfigEffectNoReboot, paths: []string{"machine.sysctls.vm.max_map_count"}},
		{name: "time servers", role: worker, patches: []string{"machine:\n  time:\n    servers: [time.example.org]\n"},
			want: ichorv1alpha1.ConfigEffectNoReboot, paths: []string{"machine.time.servers"}},
		{name: "hostname document", role: worker, hostname: "node-renamed",
			want: ichorv1alpha1.ConfigEffectNoReboot, paths: []string{"HostnameConfig:hostname"}},
		{name: "kernel arguments", role: worker, patches: []string{"machine:\n  install:\n    grubUseUKICmdline: false\n    extraKernelArgs: [console=ttyS0]\n"},
			want: ichorv1alpha1.ConfigEffectReboot, paths: []string{"machine.install.extraKernelArgs", "machine.install.grubUseUKICmdline"}},
		{name: "files are written at boot", role: worker,
			patches: []string{"machine:\n  files:\n    - path: /var/etc/motd\n      op: create\n      permissions: 0o644\n      content: hi\n"},
			want:    ichorv1alpha1.ConfigEffectReboot, paths: []string{"machine.files"}},
		{name: "environment is read at boot", role: worker, patches: []string{"machine:\n  env:\n    http_proxy: http://proxy:3128\n"},
			want: ichorv1alpha1.ConfigEffectReboot, paths: []string{"machine.env.http_proxy"}},
		{name: "apiserver argument on a control plane", role: cp, patches: []string{apiServerArg},
			want: ichorv1alpha1.ConfigEffectAPIServerRestart, paths: []string{"cluster.apiServer.extraArgs.audit-log-maxage"}},
		{name: "apiserver argument on a worker", role: worker, patches: []string{apiServerArg},
			want: ichorv1alpha1.ConfigEffectNoReboot, paths: []string{"cluster.apiServer.extraArgs.audit-log-maxage"}},
		{name: "etcd argument", role: cp, patches: []string{"cluster:\n  etcd:\n    extraArgs:\n      election-timeout: \"5000\"\n"},
			want: ichorv1alpha1.ConfigEffectReboot, paths: []string{"cluster.etcd.extraArgs.election-timeout"}},
		{name: "strongest wins", role: cp, patches: []string{apiServerArg, nodeLabelPatch("x"), "machine:\n  install:\n    wipe: true\n"},
			want:  ichorv1alpha1.ConfigEffectReboot,
			paths: []string{"cluster.apiServer.extraArgs.audit-log-maxage", "machine.install.wipe", "machine.nodeLabels.tier"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hostname := tc.hostname
			if hostname == "" {
				hostname = "node-1"
			}
			old := renderWith(t, tc.role, "node-1")
			next := renderWith(t, tc.role, hostname, tc.patches...)
			effect, changes, err := Classify(old, next, ApplyWithReboot)
			if err != nil {
				t.Fatalf("classify: %v", err)
			}
			if effect != tc.want {
				t.Errorf("effect %s, want %s (changes %+v)", effect, tc.want, changes)
			}
			var paths []string
			for _, c := range changes {
				paths = append(paths, c.Path)
			}
			if !slices.Equal(paths, tc.paths) {
				t.Errorf("changed paths %v, want %v", paths, tc.paths)
			}
		})
	}
}

func TestClassifyDocuments(t *testing.T) {
	base := "version: v1alpha1\nmachine:\n  type: worker\n"
	cases := []struct {
		name     string
		old, new string
		want     ichorv1alpha1.ConfigEffect
		paths    []string
	}{
		{name: "unknown v1alpha1 field is a reboot", old: base, new: base + "  somethingNew: true\n",
			want: ichorv1alpha1.ConfigEffectReboot, paths: []string{"machine.somethingNew"}},
		{name: "known document added", old: base,
			new:  base + "---\napiVersion: v1alpha1\nkind: ResolverConfig\nnameservers:\n  - address: 10.0.0.53\n",
			want: ichorv1alpha1.ConfigEffectNoReboot, paths: []string{"ResolverConfig:apiVersion", "ResolverConfig:kind", "ResolverConfig:nameservers"}},
		{name: "named document keyed by name", old: base + "---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nmtu: 1500\n",
			new:  base + "---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nmtu: 9000\n",
			want: ichorv1alpha1.ConfigEffectNoReboot, paths: []string{"LinkConfig/eth0:mtu"}},
		{name: "document kind not in the table is a reboot", old: base,
			new:  base + "---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\n",
			want: ichorv1alpha1.ConfigEffectReboot, paths: []string{"UserVolumeConfig/data:apiVersion", "UserVolumeConfig/data:kind", "UserVolumeConfig/data:name"}},
		{name: "kubelet image restarts the kubelet", old: base + "  kubelet:\n    image: k:v1.36.0\n", new: base + "  kubelet:\n    image: k:v1.36.1\n",
			want: ichorv1alpha1.ConfigEffectNoReboot, paths: []string{"machine.kubelet.image"}},
		{name: "KubeletConfig config is a kubelet restart",
			old:  base + "---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: k:v1.36.0\n",
			new:  base + "---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: k:v1.36.0\nconfig:\n  serverTLSBootstrap: true\n",
			want: ichorv1alpha1.ConfigEffectNoReboot, paths: []string{"KubeletConfig:config.serverTLSBootstrap"}},
		{name: "KubeletConfig image restarts the kubelet",
			old:  base + "---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: k:v1.36.0\n",
			new:  base + "---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: k:v1.36.1\n",
			want: ichorv1alpha1.ConfigEffectNoReboot, paths: []string{"KubeletConfig:image"}},
		{name: "empty section equals none", old: base, new: base + "  nodeLabels: {}\n", want: ichorv1alpha1.ConfigEffectNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			effect, changes, err := Classify([]byte(tc.old), []byte(tc.new), ApplyWithReboot)
			if err != nil {
				t.Fatalf("classify: %v", err)
			}
			var paths []string
			for _, c := range changes {
				paths = append(paths, c.Path)
			}
			if effect != tc.want || !slices.Equal(paths, tc.paths) {
				t.Errorf("got %s %v, want %s %v", effect, paths, tc.want, tc.paths)
			}
		})
	}
}

func TestClassifyRefusesBadInput(t *testing.T) {
	for name, pair := range map[string][2]string{
		"no old config":      {"", "version: v1alpha1\n"},
		"not YAML":           {"version: v1alpha1\n", "machine: [\n"},
		"duplicate document": {"version: v1alpha1\n", "version: v1alpha1\n---\nversion: v1alpha1\n"},
	} {
		if _, _, err := Classify([]byte(pair[0]), []byte(pair[1]), ApplyWithReboot); err == nil {
			t.Errorf("%s: classify succeeded", name)
		}
	}
}

func TestStrongest(t *testing.T) {
	cases := []struct {
		in   []ichorv1alpha1.ConfigEffect
		want ichorv1alpha1.ConfigEffect
	}{
		{nil, ichorv1alpha1.ConfigEffectNone},
		{[]ichorv1alpha1.ConfigEffect{ichorv1alpha1.ConfigEffectNoReboot, ichorv1alpha1.ConfigEffectNone}, ichorv1alpha1.ConfigEffectNoReboot},
		{[]ichorv1alpha1.ConfigEffect{ichorv1alpha1.ConfigEffectAPIServerRestart, ichorv1alpha1.ConfigEffectNoReboot}, ichorv1alpha1.ConfigEffectAPIServerRestart},
		{[]ichorv1alpha1.ConfigEffect{ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectAPIServerRestart}, ichorv1alpha1.ConfigEffectReboot},
	}
	for _, tc := range cases {
		if got := Strongest(tc.in...); got != tc.want {
			t.Errorf("Strongest(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// talosImmediateFields are the v1alpha1 fields Talos applies without a reboot,
// as canApplyImmediate in test/talossim/apply.go (mirroring machined) lists
// them. Every other field needs a reboot on a real node.
var talosImmediateFields = []string{
	"debug", "cluster",
	"machine.ca", "machine.acceptedCAs", "machine.time", "machine.certSANs", "machine.install",
	"machine.network", "machine.sysfs", "machine.sysctls", "machine.logging", "machine.controlPlane",
	"machine.kubelet", "machine.kernel", "machine.registries", "machine.pods", "machine.seccompProfiles",
	"machine.nodeAnnotations", "machine.nodeLabels", "machine.nodeTaints",
	"machine.features.kubernetesTalosAPIAccess", "machine.features.kubePrism", "machine.features.hostDNS",
	"machine.features.imageCache", "machine.features.nodeAddressSortAlgorithm",
}

// TestEffectTableNeverClaimsLessThanTalos keeps the table consistent with
// Talos: a field the table lets roll out without a reboot must be one Talos
// applies without a reboot.
func TestEffectTableNeverClaimsLessThanTalos(t *testing.T) {
	immediate := func(path []string) bool {
		for _, f := range talosImmediateFields {
			if hasPrefix(path, strings.Split(f, ".")) {
				return true
			}
		}
		return false
	}
	for _, rule := range v1alpha1Effects {
		if rule.effect != ichorv1alpha1.ConfigEffectReboot && !immediate(strings.Split(rule.path, ".")) {
			t.Errorf("%s is %s, but Talos needs a reboot to apply it", rule.path, rule.effect)
		}
	}
	for _, p := range controlPlaneOnly {
		if !immediate(strings.Split(p, ".")) {
			t.Errorf("control-plane-only %s is NoReboot on workers, but Talos needs a reboot to apply it", p)
		}
	}
	for _, unlisted := range []string{"machine.type", "machine.token", "machine.files", "machine.features.rbac", "version", "persist"} {
		if got := v1alpha1Effect(strings.Split(unlisted, "."), false); got != ichorv1alpha1.ConfigEffectReboot {
			t.Errorf("%s is %s, want Reboot", unlisted, got)
		}
	}
}

// TestClassifyEncryptionSwitch: turning a system volume's encryption on or
// off, changing its provider, or replacing every key it was made with
// needs a reset (the node could not open it); adding a key slot beside a
// kept one, or dropping a slot while one stays, reboots (a key rotation).
func TestClassifyEncryptionSwitch(t *testing.T) {
	base := "version: v1alpha1\nmachine:\n  type: worker\n"
	state := func(encryption string) string {
		return base + "---\napiVersion: v1alpha1\nkind: VolumeConfig\nname: STATE\n" + encryption
	}
	tpm := "encryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      tpm: {}\n"
	static := "encryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      static: {passphrase: x}\n"
	tpm01 := "encryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      tpm: {}\n    - slot: 1\n      tpm: {}\n"
	tpm1 := "encryption:\n  provider: luks2\n  keys:\n    - slot: 1\n      tpm: {}\n"
	tpmAsNodeID := "encryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      nodeID: {}\n"
	legacy := base + "  systemDiskEncryption:\n    ephemeral:\n      provider: luks2\n      keys:\n        - slot: 0\n          nodeID: {}\n"
	for _, tc := range []struct {
		name, old, new string
		reset          []string
	}{
		{"STATE encrypted", state(""), state(tpm), []string{"VolumeConfig/STATE:encryption"}},
		{"STATE decrypted", state(tpm), base, []string{"VolumeConfig/STATE:encryption"}},
		{"EPHEMERAL encrypted the deprecated way", base, legacy, []string{"machine.systemDiskEncryption.ephemeral"}},
		{"every key replaced", state(tpm), state(static), []string{"VolumeConfig/STATE:encryption"}},
		{"a slot added beside the kept one", state(tpm), state(tpm01), nil},
		{"the old slot dropped, the new one kept", state(tpm01), state(tpm1), nil},
		{"the kept slot's kind changed", state(tpm), state(tpmAsNodeID), []string{"VolumeConfig/STATE:encryption"}},
		{"moved from the deprecated field", legacy, base + "---\napiVersion: v1alpha1\nkind: VolumeConfig\nname: EPHEMERAL\n" +
			"encryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      nodeID: {}\n", nil},
		{"unchanged", state(tpm), state(tpm), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			effect, _, err := Classify([]byte(tc.old), []byte(tc.new), ApplyWithReboot)
			var reset *ResetRequiredError
			if tc.reset == nil {
				if err != nil {
					t.Fatalf("classify: %v", err)
				}
				if tc.old != tc.new && effect != ichorv1alpha1.ConfigEffectReboot {
					t.Errorf("effect %s, want reboot", effect)
				}
				return
			}
			if !errors.As(err, &reset) || !slices.Equal(reset.Paths, tc.reset) {
				t.Fatalf("want a reset for %v, got %v", tc.reset, err)
			}
			if !strings.Contains(err.Error(), "node-reset") {
				t.Errorf("the error does not say what to do: %v", err)
			}
		})
	}
}
