package render

import (
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

const (
	testNamespace    = "team-a"
	testTalosVersion = "v1.13.0"
)

// testKubernetesVersion is the newest Kubernetes Talos v1.13 supports.
const testKubernetesVersion = "v1.36.0"

var (
	bundleOnce sync.Once
	bundle     *secrets.Bundle
	bundleErr  error
)

// testBundle makes one secrets bundle per test binary: key generation is slow
// and every test may share it, since rendering never changes it.
func testBundle(t *testing.T) *secrets.Bundle {
	t.Helper()
	bundleOnce.Do(func() {
		contract, err := config.ParseContractFromVersion(testTalosVersion)
		if err != nil {
			bundleErr = err
			return
		}
		clock := secrets.NewFixedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		bundle, bundleErr = secrets.NewBundle(clock, contract)
	})
	if bundleErr != nil {
		t.Fatalf("secrets bundle: %v", bundleErr)
	}
	return bundle
}

func testCluster() *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "prod"},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      testTalosVersion,
			KubernetesVersion: testKubernetesVersion,
			ControlPlane:      ichorv1alpha1.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"},
			Network: ichorv1alpha1.ClusterNetwork{
				PodCIDRs:     []string{"10.244.0.0/16"},
				ServiceCIDRs: []string{"10.96.0.0/12"},
				DNSDomain:    "cluster.local",
			},
		},
	}
}

func testMachine(name string, role ichorv1alpha1.MachineRole, labels map[string]string) *ichorv1alpha1.TalosMachine {
	return &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, Labels: labels},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "prod",
			Role:        role,
			Address:     "10.5.0.10:50000",
			Hostname:    name,
			Install:     ichorv1alpha1.InstallSpec{Disk: "/dev/sda"},
		},
	}
}

func testPatch(name string, priority int32, target ichorv1alpha1.PatchTarget, text string) ichorv1alpha1.TalosConfigPatch {
	return ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, Generation: 1},
		Spec: ichorv1alpha1.TalosConfigPatchSpec{
			ClusterName: "prod",
			Target:      target,
			Priority:    priority,
			Patch:       text,
		},
	}
}

// nodeLabelPatch sets one node label, a field a later patch can visibly override.
func nodeLabelPatch(value string) string {
	return "machine:\n  nodeLabels:\n    tier: " + value + "\n"
}

func testInput(t *testing.T, machine *ichorv1alpha1.TalosMachine, patches ...ichorv1alpha1.TalosConfigPatch) Input {
	t.Helper()
	return Input{Cluster: testCluster(), Machine: machine, Patches: patches, Secrets: testBundle(t)}
}
