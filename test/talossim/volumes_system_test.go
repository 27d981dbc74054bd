package talossim

import (
	"slices"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
)

// promoted is a VolumeConfig document that places a promotable system volume on a partition of its own
// (Talos v1.14).
func promoted(volume string) string {
	return "---\napiVersion: v1alpha1\nkind: VolumeConfig\nname: " + volume + "\nprovisioning:\n  minSize: 2GiB\n"
}

// wipeLabels is a reset that wipes the labels and reboots, without leaving etcd first.
func wipeLabels(labels ...string) *machineapi.ResetRequest {
	req := &machineapi.ResetRequest{Reboot: true}
	for _, l := range labels {
		req.SystemPartitionsToWipe = append(req.SystemPartitionsToWipe, &machineapi.ResetPartitionSpec{Label: l, Wipe: true})
	}

	return req
}

// resetRunning resets the node with req and waits until it runs again (the reset took it out of
// PhaseRunning before answering); it returns a client of the new boot.
func resetRunning(t *testing.T, n *Node, c *client.Client, cl *testCluster, req *machineapi.ResetRequest) *client.Client {
	t.Helper()

	if err := c.ResetGeneric(testContext(t), req); err != nil {
		t.Fatalf("Reset: %v", err)
	}

	if err := n.WaitPhase(testContext(t), PhaseRunning); err != nil {
		t.Fatal(err)
	}

	return adminClient(t, n, cl)
}

// wantVolume fails the test unless the VolumeStatus id is ready, of type typ, mounted at target under
// parent, and labelled a system volume.
func wantVolume(t *testing.T, c *client.Client, id string, typ block.VolumeType, parent, target string) *block.VolumeStatusSpec {
	t.Helper()

	vs, err := safe.StateGetByID[*block.VolumeStatus](testContext(t), c.COSI, id)
	if err != nil {
		t.Fatalf("VolumeStatus %s: %v", id, err)
	}

	if _, ok := vs.Metadata().Labels().Get(block.SystemVolumeLabel); !ok {
		t.Errorf("VolumeStatus %s is not labelled a system volume", id)
	}

	st := vs.TypedSpec()
	if st.Phase != block.VolumePhaseReady || st.Type != typ || st.MountSpec.ParentID != parent || st.MountSpec.TargetPath != target {
		t.Fatalf("VolumeStatus %s = %s %s in %s/%s, want ready %s in %s/%s", id, st.Phase, st.Type, st.MountSpec.ParentID, st.MountSpec.TargetPath,
			typ, parent, target)
	}

	return st
}

// wantNoVolume fails the test if the VolumeStatus id exists.
func wantNoVolume(t *testing.T, c *client.Client, id string) {
	t.Helper()

	if _, err := safe.StateGetByID[*block.VolumeStatus](testContext(t), c.COSI, id); !state.IsNotFoundError(err) {
		t.Fatalf("VolumeStatus %s: %v, want none", id, err)
	}
}

// wantEtcdData fails the test unless the node's etcd holds its data (it is member id of a live
// cluster) or, when id is 0, holds none (the cluster lost its only member's data).
func wantEtcdData(t *testing.T, c *client.Client, cluster *EtcdCluster, id uint64) {
	t.Helper()

	member, err := safe.StateGetByID[*etcd.Member](testContext(t), c.COSI, etcd.LocalMemberID)

	switch {
	case id == 0 && (cluster.Bootstrapped() || !state.IsNotFoundError(err)):
		t.Fatalf("etcd kept its data: cluster bootstrapped %v, local member %v", cluster.Bootstrapped(), err)
	case id != 0 && (!cluster.Bootstrapped() || err != nil || member.TypedSpec().MemberID != etcd.FormatMemberID(id)):
		t.Fatalf("etcd lost its data: cluster bootstrapped %v, local member %v (%v), want %s", cluster.Bootstrapped(), member, err, etcd.FormatMemberID(id))
	}
}

// TestSystemVolumesTalos1_13: a v1.13 node publishes etcd's data directory as the volume ETCD, a
// directory of /var/lib on EPHEMERAL, and no other promotable volume. A reset may not name it (it is
// not located), a VolumeConfig may not configure it, and wiping EPHEMERAL wipes etcd's data.
func TestSystemVolumesTalos1_13(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	cluster := &EtcdCluster{}
	n, admin := bootstrappedNode(t, cl, Options{Etcd: cluster})

	wantVolume(t, admin, volumeVarLib, block.VolumeTypeDirectory, "EPHEMERAL", "lib")
	wantVolume(t, admin, "ETCD", block.VolumeTypeDirectory, "/var/lib", "etcd")

	for _, id := range []string{"CRI", "KUBELET", "LOG"} {
		wantNoVolume(t, admin, id)
	}

	wantCode(t, admin.ResetGeneric(ctx, wipeLabels("EPHEMERAL", "ETCD")), codes.Unknown, `failed to reset: volume "ETCD" is not located`)
	wantCode(t, admin.ResetGeneric(ctx, wipeLabels("KUBELET")), codes.Unknown, `failed to get volume status with label "KUBELET"`)

	_, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: append(slices.Clone(cl.cp), promoted("ETCD")...), Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT,
	})
	wantCode(t, err, codes.InvalidArgument, `VolumeConfig/ETCD: only ["STATE" "EPHEMERAL" "IMAGECACHE"] volumes are supported`)

	if n.LastReset() != nil {
		t.Fatal("a refused reset was recorded")
	}

	members := cluster.Members()
	wantEtcdData(t, admin, cluster, members[0].ID)

	admin = resetRunning(t, n, admin, cl, wipeLabels("EPHEMERAL"))

	// The member is still listed, as in etcd, but its data is gone: the cluster is lost.
	wantEtcdData(t, admin, cluster, 0)

	if got := cluster.Members(); len(got) != 1 || got[0].ID != members[0].ID {
		t.Fatalf("members after the reset = %+v", got)
	}

	wantVolume(t, admin, "ETCD", block.VolumeTypeDirectory, "/var/lib", "etcd")
}

// TestSystemVolumesTalos1_14: on a v1.14 node ETCD, CRI, KUBELET and LOG are directories on EPHEMERAL
// unless a VolumeConfig promotes them, and then partitions of their own. A directory is wiped with
// EPHEMERAL, and a reset naming it must name EPHEMERAL too; a partition keeps its data through a wipe of
// EPHEMERAL and is wiped by its label. The backing of a volume cannot change once it exists.
func TestSystemVolumesTalos1_14(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)

	cl, err := sharedCluster1_14()
	if err != nil {
		t.Fatal(err)
	}

	// The default: directories.
	dirCluster := &EtcdCluster{}
	n, admin := bootstrappedNode(t, cl, Options{Version: "v1.14.1", Etcd: dirCluster})

	wantVolume(t, admin, volumeVarLib, block.VolumeTypeDirectory, "EPHEMERAL", "lib")
	wantVolume(t, admin, "ETCD", block.VolumeTypeDirectory, "/var/lib", "etcd")
	wantVolume(t, admin, "CRI", block.VolumeTypeDirectory, "/var/lib", "containerd")
	wantVolume(t, admin, "KUBELET", block.VolumeTypeDirectory, "/var/lib", "kubelet")
	wantVolume(t, admin, "LOG", block.VolumeTypeDirectory, "EPHEMERAL", "log")

	wantCode(t, admin.ResetGeneric(ctx, wipeLabels("ETCD")), codes.Unknown,
		`failed to reset: volume "ETCD" resides on volume "EPHEMERAL", and therefore "ETCD" cannot be wiped without wiping "EPHEMERAL"`)
	wantCode(t, admin.ResetGeneric(ctx, wipeLabels("LOG", "STATE")), codes.Unknown, `volume "LOG" resides on volume "EPHEMERAL"`)

	// A directory cannot become a partition.
	_, err = admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
		Data: append(slices.Clone(cl.cp), promoted("ETCD")...), Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT,
	})
	wantCode(t, err, codes.InvalidArgument, `the backing of the "ETCD" system volume cannot be changed after creation (current: directory, requested: partition)`)

	// Talos's own integration test names EPHEMERAL with the volumes in it.
	wantEtcdData(t, admin, dirCluster, dirCluster.Members()[0].ID)
	admin = resetRunning(t, n, admin, cl, wipeLabels("EPHEMERAL", "ETCD", "CRI", "KUBELET", "LOG"))
	wantEtcdData(t, admin, dirCluster, 0)

	// Promoted: ETCD and KUBELET on partitions of their own. Talos creates the partitions that do not
	// grow first, so they come after STATE and before EPHEMERAL.
	partCluster := &EtcdCluster{}
	p, padmin := bootstrappedNode(t, &testCluster{bundle: cl.bundle, cp: append(slices.Clone(cl.cp), promoted("ETCD")+promoted("KUBELET")...)},
		Options{Version: "v1.14.1", Etcd: partCluster})

	for id, want := range map[string]string{"ETCD": "/dev/sda4", "KUBELET": "/dev/sda5"} {
		if st := wantVolume(t, padmin, id, block.VolumeTypePartition, "/var/lib", map[string]string{"ETCD": "etcd", "KUBELET": "kubelet"}[id]); st.Location != want ||
			st.ParentLocation != "/dev/sda" || st.Filesystem != block.FilesystemTypeXFS {
			t.Fatalf("VolumeStatus %s at %s on %s (%s), want %s", id, st.Location, st.ParentLocation, st.Filesystem, want)
		}
	}

	if st := volumeStatus(t, padmin, "EPHEMERAL"); st.Location != "/dev/sda6" {
		t.Fatalf("EPHEMERAL at %s, want /dev/sda6", st.Location)
	}

	wantVolume(t, padmin, "CRI", block.VolumeTypeDirectory, "/var/lib", "containerd")

	member := partCluster.Members()[0].ID
	setKubeletCerts(p)

	padmin = resetRunning(t, p, padmin, cl, wipeLabels("EPHEMERAL"))
	wantEtcdData(t, padmin, partCluster, member)

	if !hasKubeletCerts(p) {
		t.Fatal("wiping EPHEMERAL wiped the KUBELET partition's certificates")
	}

	// ETCD alone: etcd's data goes, the kubelet's stays.
	padmin = resetRunning(t, p, padmin, cl, wipeLabels("ETCD"))
	wantEtcdData(t, padmin, partCluster, 0)

	if !hasKubeletCerts(p) {
		t.Fatal("wiping ETCD wiped the kubelet's certificates")
	}

	wantVolume(t, padmin, "ETCD", block.VolumeTypePartition, "/var/lib", "etcd")

	padmin = resetRunning(t, p, padmin, cl, wipeLabels("KUBELET"))

	if hasKubeletCerts(p) {
		t.Fatal("wiping KUBELET kept the kubelet's certificates")
	}

	// A partition cannot become a directory: its VolumeConfig stays.
	_, err = padmin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cl.cp, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT})
	wantCode(t, err, codes.InvalidArgument,
		`the "ETCD" system volume is backed by a dedicated partition and its VolumeConfig cannot be removed; migrating a system volume off a dedicated partition is not supported`)
}

// setKubeletCerts gives a node without Kubernetes kubelet certificates in /var/lib/kubelet, for a test
// of what a reset keeps.
func setKubeletCerts(n *Node) {
	n.mu.Lock()
	defer n.mu.Unlock()

	n.kubeletCerts = &kubeletCerts{}
}

// hasKubeletCerts reports whether the node's kubelet certificates are still there.
func hasKubeletCerts(n *Node) bool {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.kubeletCerts != nil
}
