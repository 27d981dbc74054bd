package talossim

import (
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"ichor.dev/ichor/pkg/talos"
)

// TestIchorWipesEtcdInEitherLayout: Ichor's own Talos calls (pkg/talos), as
// an etcd-restore and a node reset make them, against v1.14.1 nodes of
// both layouts. Wiping etcd's data wipes the ETCD partition where the node
// has one (its kubelet's certificates stay) and EPHEMERAL where etcd is a
// directory on it; a reset to maintenance wipes the promoted partitions
// with EPHEMERAL, as it wipes them as directories.
func TestIchorWipesEtcdInEitherLayout(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)

	cl, err := sharedCluster1_14()
	if err != nil {
		t.Fatal(err)
	}

	dial := func(n *Node) talos.Node {
		t.Helper()

		creds, err := talos.MintCredentials(cl.bundle, role.MakeSet(role.Admin), time.Now(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}

		node, err := talos.Machinery{}.Configured(ctx, n.Addr(), creds)
		if err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() { _ = node.Close() })

		return node
	}
	running := func(n *Node) {
		t.Helper()

		if err := n.WaitPhase(ctx, PhaseRunning); err != nil {
			t.Fatal(err)
		}
	}

	// Directories: EPHEMERAL goes, and etcd's data with it.
	dirCluster := &EtcdCluster{}
	d, dadmin := bootstrappedNode(t, cl, Options{Version: "v1.14.1", Etcd: dirCluster})
	wantEtcdData(t, dadmin, dirCluster, dirCluster.Members()[0].ID)
	setKubeletCerts(d)

	if err := dial(d).WipeEtcdData(ctx); err != nil {
		t.Fatalf("WipeEtcdData (directories): %v", err)
	}

	running(d)
	wantEtcdData(t, adminClient(t, d, cl), dirCluster, 0)

	if hasKubeletCerts(d) {
		t.Error("wiping EPHEMERAL kept the kubelet's certificates")
	}

	// Partitions: ETCD alone goes.
	partCluster := &EtcdCluster{}
	p, _ := bootstrappedNode(t, &testCluster{bundle: cl.bundle, cp: append(slices.Clone(cl.cp), promoted("ETCD")+promoted("KUBELET")...)},
		Options{Version: "v1.14.1", Etcd: partCluster})
	setKubeletCerts(p)

	node := dial(p)
	if v, err := node.Volume(ctx, "ETCD"); err != nil || v.Type != "partition" {
		t.Fatalf("ETCD volume %+v, %v: want a partition", v, err)
	}

	if err := node.WipeEtcdData(ctx); err != nil {
		t.Fatalf("WipeEtcdData (partitions): %v", err)
	}

	running(p)
	wantEtcdData(t, adminClient(t, p, cl), partCluster, 0)

	if !hasKubeletCerts(p) {
		t.Error("wiping etcd's data wiped the KUBELET partition")
	}

	// To maintenance: the promoted partitions go with EPHEMERAL.
	if err := dial(p).Reset(ctx, talos.ResetRequest{SystemLabels: []string{"STATE", "EPHEMERAL"}}); err != nil {
		t.Fatalf("Reset to maintenance (partitions): %v", err)
	}

	if err := p.WaitPhase(ctx, PhaseMaintenance); err != nil {
		t.Fatal(err)
	}

	if hasKubeletCerts(p) {
		t.Error("a reset of STATE and EPHEMERAL kept the KUBELET partition's certificates")
	}
}
