package render

import (
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestKubernetesVersionsMoveOneComponent: a version a kubernetes-upgrade
// set for one component moves that component's image and nothing else, with
// the effect the machine config controller rolls it out by, at both
// contract families; a worker has no control-plane section to move.
func TestKubernetesVersionsMoveOneComponent(t *testing.T) {
	cp, worker := ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.MachineRoleWorker
	for _, tc := range []struct {
		talosVersion string
		role         ichorv1alpha1.MachineRole
		versions     ichorv1alpha1.KubernetesVersions
		paths        []string
		effect       ichorv1alpha1.ConfigEffect
	}{
		{"v1.13.0", cp, ichorv1alpha1.KubernetesVersions{APIServer: "v1.36.1"}, []string{"cluster.apiServer.image"}, ichorv1alpha1.ConfigEffectAPIServerRestart},
		{"v1.13.0", cp, ichorv1alpha1.KubernetesVersions{ControllerManager: "v1.36.1"}, []string{"cluster.controllerManager.image"}, ichorv1alpha1.ConfigEffectNoReboot},
		{"v1.13.0", cp, ichorv1alpha1.KubernetesVersions{Scheduler: "v1.36.1"}, []string{"cluster.scheduler.image"}, ichorv1alpha1.ConfigEffectNoReboot},
		{"v1.13.0", cp, ichorv1alpha1.KubernetesVersions{Proxy: "v1.36.1"}, []string{"cluster.proxy.image"}, ichorv1alpha1.ConfigEffectNoReboot},
		{"v1.13.0", cp, ichorv1alpha1.KubernetesVersions{Kubelet: "v1.36.1"}, []string{"machine.kubelet.image"}, ichorv1alpha1.ConfigEffectNoReboot},
		{"v1.14.0", cp, ichorv1alpha1.KubernetesVersions{Kubelet: "v1.36.1"}, []string{"KubeletConfig:image"}, ichorv1alpha1.ConfigEffectNoReboot},
		{"v1.13.0", worker, ichorv1alpha1.KubernetesVersions{Kubelet: "v1.36.1"}, []string{"machine.kubelet.image"}, ichorv1alpha1.ConfigEffectNoReboot},
		{"v1.13.0", worker, ichorv1alpha1.KubernetesVersions{APIServer: "v1.36.1", ControllerManager: "v1.36.1", Scheduler: "v1.36.1"}, nil, ichorv1alpha1.ConfigEffectNone},
		{"v1.13.0", worker, ichorv1alpha1.KubernetesVersions{APIServer: "v1.36.0", Kubelet: "v1.36.0"}, nil, ichorv1alpha1.ConfigEffectNone},
	} {
		t.Run(tc.talosVersion+"/"+string(tc.role), func(t *testing.T) {
			in := testInput(t, testMachine("node-1", tc.role, nil))
			in.Cluster.Spec.TalosVersion = tc.talosVersion
			before, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			in.Machine = in.Machine.DeepCopy()
			in.Machine.Status.Kubernetes = &tc.versions
			after, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			effect, changes, err := Classify(before.Config, after.Config, ApplyWithReboot)
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, c := range changes {
				paths = append(paths, c.Path)
			}
			if !slices.Equal(paths, tc.paths) || effect != tc.effect {
				t.Fatalf("changed %v (effect %s), want %v (effect %s)", paths, effect, tc.paths, tc.effect)
			}
		})
	}
}

// TestInstallerImageOfEitherLayout reads the installer a rendered config
// names, from machine.install (v1.13) or UnattendedInstallConfig (v1.14).
func TestInstallerImageOfEitherLayout(t *testing.T) {
	for _, version := range []string{"v1.13.0", "v1.14.1"} {
		in := testInput(t, testMachine("w-1", ichorv1alpha1.MachineRoleWorker, nil))
		in.Cluster.Spec.TalosVersion = version
		in.InstallImage = "mirror.example.com/siderolabs/installer"
		out, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configloader.NewFromBytes(out.Config)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := InstallerImage(cfg), "mirror.example.com/siderolabs/installer:"+version; got != want {
			t.Errorf("%s: installer %q, want %q", version, got, want)
		}
		_, inDocument := cfg.UnattendedInstallConfig().(interface{ InstallerImage() string })
		if inDocument != (version == "v1.14.1") {
			t.Errorf("%s: an UnattendedInstallConfig is %t", version, inDocument)
		}
	}
}
