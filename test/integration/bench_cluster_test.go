package integration

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/talossim"
)

// benchClusterSpec is the shape of a benchmark's cluster.
type benchClusterSpec struct {
	// name of the TalosCluster, and of its simulated etcd.
	name string
	// endpointIP is the loopback address its Kubernetes API listens on;
	// nodes take the addresses after firstAddr.
	endpointIP, firstAddr string
	// controlPlanes and workers are how many machines of each role.
	controlPlanes, workers int
	// rebootDelay is each node's own reboot time; pullDelay the time it
	// takes to download an image it does not have.
	rebootDelay, pullDelay time.Duration
}

// benchCluster builds a Ready cluster of simulated nodes in ns with a real
// Kubernetes control plane, its machines created and approved through the
// API as a controller or a person would, and returns the nodes by machine
// name (n0000, n0001, …; control planes first) and the cluster's endpoint.
func benchCluster(ctx context.Context, b *testing.B, ns string, spec benchClusterSpec) (map[string]*talossim.Node, *talossim.Kubernetes, string) {
	b.Helper()
	binDir, err := harness.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	kube := &talossim.Kubernetes{BinDir: binDir, Dir: b.TempDir()}
	b.Cleanup(kube.Stop)
	ports, err := proc.FreePorts(spec.endpointIP, 1)
	if err != nil {
		b.Fatal(err)
	}
	endpoint := fmt.Sprintf("https://%s:%d", spec.endpointIP, ports[0])
	mustApply(ctx, b, fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: %s, namespace: %s}
spec: {talosVersion: v1.13.0, kubernetesVersion: v1.36.0, controlPlane: {endpoint: "%s"}}
`, spec.name, ns, endpoint))

	etcd, trustd := &talossim.EtcdCluster{Name: spec.name}, talossim.NewTrustd()
	machines := apiClient(b).IchorV1alpha1().TalosMachines(ns)
	addr := netip.MustParseAddr(spec.firstAddr)
	n := spec.controlPlanes + spec.workers
	names := make([]string, n)
	nodes := map[string]*talossim.Node{}
	for i := range n {
		addr = addr.Next()
		names[i] = fmt.Sprintf("n%04d", i)
		nodes[names[i]] = simNode(b, talossim.Options{
			ListenAddress: addr.String() + ":0", Kubernetes: kube, Etcd: etcd, Trustd: trustd,
			InstallDelay: 10 * time.Millisecond, RebootDelay: spec.rebootDelay, PullDelay: spec.pullDelay,
		})
		role := v1alpha1.MachineRoleWorker
		if i < spec.controlPlanes {
			role = v1alpha1.MachineRoleControlPlane
		}
		m := &v1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: ns},
			Spec: v1alpha1.TalosMachineSpec{ClusterName: spec.name, Role: role, Address: nodes[names[i]].Addr(), Hostname: names[i],
				Install: v1alpha1.InstallSpec{Disk: "/dev/sda"}},
		}
		if _, err := machines.Create(ctx, m, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range names {
		m := waitMachineFor(ctx, b, ns, name, 10*time.Minute, "pinned", func(m *v1alpha1.TalosMachine) bool { return m.Status.Maintenance != nil })
		m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved}
		if _, err := machines.UpdateApproval(ctx, name, m, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	waitClusterFor(ctx, b, ns, spec.name, 20*time.Minute, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	return nodes, kube, endpoint
}
