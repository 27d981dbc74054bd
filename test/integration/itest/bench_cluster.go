package itest

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

// BenchClusterSpec is the shape of a benchmark's cluster.
type BenchClusterSpec struct {
	// Name of the TalosCluster, and of its simulated etcd.
	Name string
	// endpointIP is the loopback address its Kubernetes API listens on;
	// nodes take the addresses after firstAddr.
	EndpointIP, FirstAddr string
	// controlPlanes and workers are how many machines of each role.
	ControlPlanes, Workers int
	// rebootDelay is each node's own reboot time; pullDelay the time it
	// takes to download an image it does not have.
	RebootDelay, PullDelay time.Duration
}

// BenchCluster builds a Ready cluster of simulated nodes in ns with a real
// Kubernetes control plane, its machines created and approved through the
// API as a controller or a person would, and returns the nodes by machine
// name (n0000, n0001, …; control planes first) and the cluster's endpoint.
func BenchCluster(ctx context.Context, b *testing.B, ns string, spec BenchClusterSpec) (map[string]*talossim.Node, *talossim.Kubernetes, string) {
	b.Helper()
	binDir, err := harness.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	kube := &talossim.Kubernetes{BinDir: binDir, Dir: b.TempDir()}
	b.Cleanup(kube.Stop)
	ports, err := proc.FreePorts(spec.EndpointIP, 1)
	if err != nil {
		b.Fatal(err)
	}
	endpoint := fmt.Sprintf("https://%s:%d", spec.EndpointIP, ports[0])
	MustApply(ctx, b, fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: %s, namespace: %s}
spec: {talosVersion: v1.13.0, kubernetesVersion: v1.36.0, controlPlane: {endpoint: "%s"}}
`, spec.Name, ns, endpoint))

	etcd, trustd := &talossim.EtcdCluster{Name: spec.Name}, talossim.NewTrustd()
	machines := APIClient(b).IchorV1alpha1().TalosMachines(ns)
	addr := netip.MustParseAddr(spec.FirstAddr)
	n := spec.ControlPlanes + spec.Workers
	names := make([]string, n)
	nodes := map[string]*talossim.Node{}
	for i := range n {
		addr = addr.Next()
		names[i] = fmt.Sprintf("n%04d", i)
		nodes[names[i]] = SimNode(b, talossim.Options{
			ListenAddress: addr.String() + ":0", Kubernetes: kube, Etcd: etcd, Trustd: trustd,
			InstallDelay: 10 * time.Millisecond, RebootDelay: spec.RebootDelay, PullDelay: spec.PullDelay,
		})
		role := v1alpha1.MachineRoleWorker
		if i < spec.ControlPlanes {
			role = v1alpha1.MachineRoleControlPlane
		}
		m := &v1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: ns},
			Spec: v1alpha1.TalosMachineSpec{ClusterName: spec.Name, Role: role, Address: nodes[names[i]].Addr(), Hostname: names[i],
				Install: v1alpha1.InstallSpec{Disk: "/dev/sda"}},
		}
		if _, err := machines.Create(ctx, m, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range names {
		m := WaitMachineFor(ctx, b, ns, name, 10*time.Minute, "pinned", func(m *v1alpha1.TalosMachine) bool { return m.Status.Maintenance != nil })
		m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved}
		if _, err := machines.UpdateApproval(ctx, name, m, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	WaitClusterFor(ctx, b, ns, spec.Name, 20*time.Minute, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	return nodes, kube, endpoint
}
