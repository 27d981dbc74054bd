package render

import (
	"slices"
	"strings"
	"testing"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

func TestApplyModelOf(t *testing.T) {
	for version, want := range map[string]ApplyModel{
		"v1.13.5": ApplyWithReboot, "v1.14.0-beta.1": ApplyLive, "v1.14.1": ApplyLive, "1.15.0": ApplyLive,
		"": ApplyWithReboot, "latest": ApplyWithReboot,
	} {
		if got := ApplyModelOf(version); got != want {
			t.Errorf("ApplyModelOf(%q) = %v, want %v", version, got, want)
		}
	}
}

// TestClassifyLive: a node that applies live reboots only for what its
// boot reads; the rest of what an older node rebooted for is a restart of
// the control plane's components, or nothing.
func TestClassifyLive(t *testing.T) {
	cp := "version: v1alpha1\nmachine:\n  type: controlplane\n"
	worker := "version: v1alpha1\nmachine:\n  type: worker\n"
	cases := []struct {
		name         string
		old, new     string
		reboot, live ichorv1alpha1.ConfigEffect
	}{
		{"install disk: read by the next install", cp + "  install:\n    disk: /dev/sda\n", cp + "  install:\n    disk: /dev/sdb\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectNoReboot},
		{"files: written at boot", cp, cp + "  files:\n    - path: /var/f\n      content: x\n      op: create\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectReboot},
		{"env: set at boot", cp, cp + "  env:\n    HTTP_PROXY: http://10.0.0.1:3128\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectReboot},
		{"disk quotas: a mount option", cp + "  features:\n    diskQuotaSupport: true\n", cp + "  features:\n    diskQuotaSupport: false\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectReboot},
		{"a feature Ichor has not studied", cp, cp + "  features:\n    somethingNew: true\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectReboot},
		{"etcd on a control plane: etcd restarts", cp + "cluster:\n  etcd:\n    extraArgs:\n      a: b\n", cp + "cluster:\n  etcd:\n    extraArgs:\n      a: c\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectAPIServerRestart},
		{"etcd on a worker: nothing runs it", worker + "cluster:\n  etcd:\n    extraArgs:\n      a: b\n", worker + "cluster:\n  etcd:\n    extraArgs:\n      a: c\n",
			ichorv1alpha1.ConfigEffectNoReboot, ichorv1alpha1.ConfigEffectNoReboot},
		{"the cluster's secrets: regenerated certificates", cp + "cluster:\n  token: a\n", cp + "cluster:\n  token: b\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectAPIServerRestart},
		{"installer document", cp, cp + "---\napiVersion: v1alpha1\nkind: UnattendedInstallConfig\ninstaller:\n  image: i:v1.14.1\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectNoReboot},
		{"workload isolation: the sandbox starts at boot", cp, cp + "---\napiVersion: v1alpha1\nkind: SecurityProfileConfig\nworkloadIsolation: true\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectReboot},
		{"a system volume's mount: at boot", cp, cp + "---\napiVersion: v1alpha1\nkind: VolumeConfig\nname: EPHEMERAL\nmount:\n  secure: true\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectReboot},
		{"a user volume: provisioned live", cp, cp + "---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectNoReboot},
		{"a kind Ichor has not studied", cp, cp + "---\napiVersion: v1alpha1\nkind: RAIDArrayConfig\nname: md0\n",
			ichorv1alpha1.ConfigEffectReboot, ichorv1alpha1.ConfigEffectReboot},
		{"live changes stay as they were", cp + "cluster:\n  apiServer:\n    image: a\n", cp + "cluster:\n  apiServer:\n    image: b\n",
			ichorv1alpha1.ConfigEffectAPIServerRestart, ichorv1alpha1.ConfigEffectAPIServerRestart},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for model, want := range map[ApplyModel]ichorv1alpha1.ConfigEffect{ApplyWithReboot: tc.reboot, ApplyLive: tc.live} {
				effect, _, err := Classify([]byte(tc.old), []byte(tc.new), model)
				if err != nil {
					t.Fatal(err)
				}
				if effect != want {
					t.Errorf("model %d: %s, want %s", model, effect, want)
				}
			}
		})
	}
}

// TestClassifyContractMove: the same machine rendered for the v1.13 and
// then the v1.14 contract. A v1.13 node would reboot for the new layout; a
// v1.14 node takes it live, and reboots only for what the v1.14 contract
// adds that its boot reads (workload isolation, EPHEMERAL's mount options).
func TestClassifyContractMove(t *testing.T) {
	for _, role := range []ichorv1alpha1.MachineRole{ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.MachineRoleWorker} {
		t.Run(string(role), func(t *testing.T) {
			render := func(version string) []byte {
				c := testCluster()
				c.Spec.TalosVersion = version
				r, err := Render(Input{Cluster: c, Machine: testMachine("m", role, nil), Secrets: testBundle(t), InstallImage: "installer.test/installer"})
				if err != nil {
					t.Fatal(err)
				}
				return r.Config
			}
			before, after := render("v1.13.0"), render("v1.14.1")
			if effect, _, err := Classify(before, after, ApplyWithReboot); err != nil || effect != ichorv1alpha1.ConfigEffectReboot {
				t.Errorf("on a node rebooting to apply: %s %v, want Reboot", effect, err)
			}
			effect, changes, err := Classify(before, after, ApplyLive)
			if err != nil {
				t.Fatal(err)
			}
			var reboots []string
			for _, c := range changes {
				if c.Effect == ichorv1alpha1.ConfigEffectReboot {
					reboots = append(reboots, strings.SplitN(c.Path, ":", 2)[0])
				}
			}
			reboots = slices.Compact(reboots)
			if want := []string{"SecurityProfileConfig", "VolumeConfig/EPHEMERAL"}; effect != ichorv1alpha1.ConfigEffectReboot || !slices.Equal(reboots, want) {
				t.Errorf("on a node applying live: %s, rebooting for %v, want Reboot for %v only", effect, reboots, want)
			}
		})
	}
}
