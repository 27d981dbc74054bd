package itest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorv1 "ichor.dev/ichor/pkg/generated/clientset/versioned/typed/ichor/v1alpha1"
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/talossim"
)

// ForeignCluster is a Talos cluster Ichor does not manage: its secrets and
// its worker config, generated with machinery as talosctl gen config does.
type ForeignCluster struct {
	Bundle *secrets.Bundle
	Worker []byte
}

func NewForeignCluster(t *testing.T, endpoint string) *ForeignCluster {
	t.Helper()
	vc, err := config.ParseContractFromVersion("v1.13.0")
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), vc)
	if err != nil {
		t.Fatal(err)
	}
	in, err := generate.NewInput("foreign", endpoint, "v1.36.0",
		generate.WithVersionContract(vc), generate.WithSecretsBundle(bundle), generate.WithInstallDisk("/dev/sda"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := in.Config(machine.TypeWorker)
	if err != nil {
		t.Fatal(err)
	}
	worker, err := cfg.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return &ForeignCluster{Bundle: bundle, Worker: worker}
}

// Talosconfig is an os:admin talosconfig of the foreign cluster for address.
func (f *ForeignCluster) Talosconfig(t *testing.T, address string) []byte {
	t.Helper()
	cert, err := secrets.NewAdminCertificateAndKey(time.Now(), f.Bundle.Certs.OS, role.MakeSet(role.Admin), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, err := clientconfig.NewConfig("foreign", []string{address}, f.Bundle.Certs.OS.Crt, cert).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// talosctl runs the real talosctl in a scratch directory.
func TalosctlIn(ctx context.Context, t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	bin, err := proc.TalosctlBinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "talosctl"), args...)
	cmd.Dir, cmd.Env = dir, []string{"HOME=" + dir}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// reclaims: an admin resets and adds a Talos node Ichor does not manage,
// with a talosconfig handed over in a Secret that is gone afterwards, and
// reclaims a machine of demo into another cluster; the refusals come first.
func (d *DemoCluster) Reclaims(t *testing.T) {
	ctx := d.Ctx
	kube := kubernetes.NewForConfigOrDie(CP.AdminConfig)
	reclaims := APIClientFor(t, CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().MachineReclaims(d.Ns)

	// A worker of a Talos cluster nobody here manages, configured with the
	// real talosctl as its owner did.
	// OSCA stands for its cluster's trustd; demo's control planes serve it
	// once it joins demo.
	foreign := NewForeignCluster(t, "https://127.0.3.102:6443")
	// Its smallest disk is the USB stick it once booted from.
	const nodeUUID = "5f0e8d6a-1c2b-4a3d-8e9f-0000000003a0"
	node := SimNode(t, talossim.Options{
		ListenAddress: "127.0.3.30:0", SystemUUID: nodeUUID, Kubernetes: d.Kube, Trustd: d.Trustd, OSCA: foreign.Bundle.Certs.OS,
		InstallDelay: 200 * time.Millisecond, RebootDelay: 200 * time.Millisecond, Registry: d.Registry,
		Disks: []talossim.Disk{{Path: "/dev/sda", Size: 64 << 30, Transport: "sata"}, {Path: "/dev/sdc", Size: 16 << 30, Transport: "usb"}},
	})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "worker.yaml"), foreign.Worker, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := TalosctlIn(ctx, t, dir, "apply-config", "--insecure", "--nodes", node.Addr(), "--file", "worker.yaml"); err != nil {
		t.Fatalf("talosctl apply-config: %v\n%s", err, out)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return node.Phase() == talossim.PhaseRunning, nil
	}); err != nil {
		t.Fatalf("the foreign worker never ran: %s", node.Phase())
	}

	secret := func(name string, typ corev1.SecretType, talosconfig []byte) {
		t.Helper()
		if _, err := kube.CoreV1().Secrets(d.Ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Type: typ, Data: map[string][]byte{"talosconfig": talosconfig},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		_, err := kube.CoreV1().Secrets(d.Ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	secret("foreign-talosconfig", v1alpha1.SecretTypeTalosconfig, foreign.Talosconfig(t, node.Addr()))
	secret("opaque-talosconfig", corev1.SecretTypeOpaque, foreign.Talosconfig(t, node.Addr()))
	secret("wrong-ca-talosconfig", v1alpha1.SecretTypeTalosconfig, NewForeignCluster(t, "https://127.0.3.103:6443").Talosconfig(t, node.Addr()))
	unmanaged := func(name, secretName string) *v1alpha1.MachineReclaim {
		return &v1alpha1.MachineReclaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.MachineReclaimSpec{ClusterName: "demo", Unmanaged: &v1alpha1.UnmanagedMachine{
				Address: node.Addr(), TalosconfigSecretRef: v1alpha1.SecretKeySelector{Name: secretName, Key: "talosconfig"},
			}},
		}
	}

	// An admin who may not read the Secret may not hand it over: the
	// controller would use, then delete, a credential that is not theirs.
	_, err := reclaims.Create(ctx, unmanaged("worker-3", "foreign-talosconfig"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `needs the "get" and "delete" verbs on secrets "foreign-talosconfig"`) {
		t.Fatalf("a reclaim handing over a Secret its creator cannot read: %v, want Forbidden naming the Secret", err)
	}
	if _, err := kube.RbacV1().Roles(d.Ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "carol-talosconfigs"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "delete"},
			ResourceNames: []string{"foreign-talosconfig", "opaque-talosconfig", "wrong-ca-talosconfig"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings(d.Ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "carol-talosconfigs"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "carol-talosconfigs"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "carol"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create := func(r *v1alpha1.MachineReclaim) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := reclaims.Create(ctx, r.DeepCopy(), metav1.CreateOptions{})
			return err == nil, Client403Only(err) // RBAC caches may lag the binding a moment
		}); err != nil {
			t.Fatalf("create MachineReclaim %s: %v", r.Name, err)
		}
	}
	start := func(name string) {
		t.Helper()
		operator := APIClientFor(t, CP.ConfigFor("olivia", "ichor:operator")).IchorV1alpha1().MachineReclaims(d.Ns)
		if _, err := operator.Reclaim(ctx, name, &v1alpha1.MachineReclaim{}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("an operator reclaims %s: %v, want Forbidden", name, err)
		}
		if _, err := reclaims.Reclaim(ctx, name, &v1alpha1.MachineReclaim{}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("reclaim %s: %v", name, err)
		}
	}

	// A Secret not handed over (of another type) is neither used nor deleted;
	// a talosconfig the node refuses fails the reset, and is deleted.
	create(unmanaged("opaque", "opaque-talosconfig"))
	start("opaque")
	r := WaitReclaim(ctx, t, reclaims, "opaque", v1alpha1.ReclaimFailed)
	ExpectReclaimCondition(t, r, v1alpha1.ReclaimConditionSucceeded, v1alpha1.ReclaimReasonBadTalosconfig, `is of type "Opaque", not "ichor.dev/talosconfig"`)
	if !exists("opaque-talosconfig") {
		t.Errorf("the Opaque Secret was deleted")
	}
	create(unmanaged("wrong-ca", "wrong-ca-talosconfig"))
	start("wrong-ca")
	r = WaitReclaim(ctx, t, reclaims, "wrong-ca", v1alpha1.ReclaimFailed)
	RunIchor(ctx, t, nil, "carol", "ichor:admin", "-n", d.Ns, "wait", "machinereclaim/wrong-ca").Fails(t, "ichor wait for a failed reclaim",
		"machinereclaim.ichor.dev/wrong-ca Failed: ResetFailed: the node at")
	ExpectReclaimCondition(t, r, v1alpha1.ReclaimConditionSucceeded, v1alpha1.ReclaimReasonResetFailed, "does not answer with the talosconfig")
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !exists("wrong-ca-talosconfig"), nil
	}); err != nil {
		t.Errorf("the talosconfig of a failed reclaim is still there")
	}
	if got := TimesEntered(node, talossim.PhaseResetting); got != 0 {
		t.Fatalf("the foreign node was reset %d times by refused reclaims", got)
	}

	// Reset and add: the node leaves its cluster, comes back in maintenance
	// mode, and joins demo as TalosMachine worker-3, approved on carol's behalf.
	create(unmanaged("worker-3", "foreign-talosconfig"))
	start("worker-3")
	r = WaitReclaimFor(ctx, t, reclaims, "worker-3", v1alpha1.ReclaimSucceeded, 3*time.Minute)
	ExpectReclaimCondition(t, r, v1alpha1.ReclaimConditionSucceeded, v1alpha1.ReclaimReasonJoined, "is Ready in TalosCluster demo")
	if exists("foreign-talosconfig") {
		t.Errorf("the handed-over talosconfig is still there after the reset")
	}
	if got := TimesEntered(node, talossim.PhaseResetting); got != 1 {
		t.Errorf("the foreign node was reset %d times, want 1", got)
	}
	m, err := d.Machines.Get(ctx, "worker-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Read over the node's Talos API with the talosconfig before the reset,
	// and reported by the node pinned after it.
	if a := m.Status.Approval; a == nil || a.Decision != v1alpha1.ApprovalApproved || a.By != ControllerUser ||
		!strings.Contains(a.Reason, "MachineReclaim worker-3, started by carol: the node reset (system UUID "+nodeUUID) || r.Status.SystemUUID != nodeUUID {
		t.Errorf("worker-3's approval: %+v; the reclaim's system UUID %q", a, r.Status.SystemUUID)
	}
	if m.Labels[v1alpha1.LabelMachineReclaim] != "worker-3" || m.Status.Phase != v1alpha1.MachinePhaseReady ||
		m.Status.Maintenance == nil || m.Status.Maintenance.CertificateFingerprint != node.MaintenanceFingerprint() {
		t.Errorf("worker-3: %s", DescribeStatus(m))
	}
	WaitEventSaying(ctx, t, d.Ns, "worker-3", corev1.EventTypeNormal, "TalosconfigDeleted", "Deleted Secret foreign-talosconfig")
	// No install disk named: the smallest one not on USB.
	if got := node.SystemDisk(); got != "/dev/sda" {
		t.Errorf("worker-3 installed on %q, want /dev/sda (the smallest disk not on USB)", got)
	}
	if hw := m.Status.Hardware; hw == nil || len(hw.Disks) != 2 || hw.Disks[1].Transport != "usb" {
		t.Errorf("worker-3's disks: %+v", hw)
	}

	// A managed machine goes to another running cluster: spare, one control
	// plane, in its own namespace. The last control plane of spare cannot be
	// reclaimed: deleting it is refused, and the reclaim says so.
	spareNS, spareCP := d.SpareCluster(t)
	create(&v1alpha1.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Name: "take-spare-cp"},
		Spec: v1alpha1.MachineReclaimSpec{ClusterName: "demo", Role: v1alpha1.MachineRoleControlPlane,
			MachineRef: &v1alpha1.MachineReference{Namespace: spareNS, Name: "spare-cp-1"}},
	})
	start("take-spare-cp")
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err = reclaims.Get(ctx, "take-spare-cp", metav1.GetOptions{})
		c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ReclaimConditionProgressing)
		return err == nil && c != nil && c.Reason == v1alpha1.ReclaimReasonDeleteRefused, err
	}); err != nil {
		t.Fatalf("the reclaim of spare's last control plane: %v; %+v", err, r.Status)
	}
	ExpectReclaimCondition(t, r, v1alpha1.ReclaimConditionProgressing, v1alpha1.ReclaimReasonDeleteRefused,
		"spare-cp-1 is the last control plane of TalosCluster spare")
	WaitEventSaying(ctx, t, d.Ns, "take-spare-cp", corev1.EventTypeWarning, v1alpha1.ReclaimReasonDeleteRefused, "last control plane")
	if err := reclaims.Delete(ctx, "take-spare-cp", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if m, err := MachinesIn(t, spareNS).Get(ctx, "spare-cp-1", metav1.GetOptions{}); err != nil || m.DeletionTimestamp != nil ||
		TimesEntered(spareCP, talossim.PhaseResetting) != 0 {
		t.Fatalf("spare's control plane after the refused reclaim: %v, reset %d times", err, TimesEntered(spareCP, talossim.PhaseResetting))
	}

	// demo's new worker-3 goes to spare: its deletion resets its node
	// (drained, STATE and EPHEMERAL wiped), and the node joins spare.
	spareReclaims := APIClientFor(t, CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().MachineReclaims(spareNS)
	if _, err := spareReclaims.Create(ctx, &v1alpha1.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Name: "spare-worker"},
		Spec:       v1alpha1.MachineReclaimSpec{ClusterName: "spare", MachineRef: &v1alpha1.MachineReference{Namespace: d.Ns, Name: "worker-3"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Started and followed with the ichor CLI, as a user would.
	waitCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	RunIchor(waitCtx, t, nil, "carol", "ichor:admin", "-n", spareNS, "reclaim", "spare-worker", "--wait").Ok(t, "ichor reclaim --wait",
		"machinereclaim.ichor.dev/spare-worker reclaim started", "machinereclaim.ichor.dev/spare-worker Succeeded: TalosMachine spare-worker")
	r = WaitReclaimFor(ctx, t, spareReclaims, "spare-worker", v1alpha1.ReclaimSucceeded, 3*time.Minute)
	if r.Status.ResetAt == nil || r.Status.Address != node.Addr() || r.Status.MachineName != "spare-worker" || r.Status.SystemUUID != nodeUUID {
		t.Errorf("status of the managed reclaim: %+v", r.Status)
	}
	if _, err := d.Machines.Get(ctx, "worker-3", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the old TalosMachine worker-3: %v, want it gone", err)
	}
	if got := TimesEntered(node, talossim.PhaseResetting); got != 2 {
		t.Errorf("the node was reset %d times in all, want 2", got)
	}
	moved, err := MachinesIn(t, spareNS).Get(ctx, "spare-worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := moved.Status.Approval; moved.Status.Phase != v1alpha1.MachinePhaseReady || a == nil ||
		!strings.Contains(a.Reason, "MachineReclaim spare-worker, started by carol") {
		t.Errorf("spare-worker: %s, approval %+v", DescribeStatus(moved), a)
	}
	spareClusters := APIClientFor(t, CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosClusters(spareNS)
	var counts v1alpha1.MachineCounts
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := spareClusters.Get(ctx, "spare", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		counts = c.Status.Machines
		return counts.Workers == 1 && counts.Ready == 2 && meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ClusterConditionReady), nil
	}); err != nil {
		t.Errorf("spare's machines: %+v, want its control plane and the reclaimed worker Ready: %v", counts, err)
	}
}

// SpareCluster builds spare, a one-control-plane cluster in a namespace of
// its own, and waits until it is Ready.
func (d *DemoCluster) SpareCluster(t *testing.T) (string, *talossim.Node) {
	t.Helper()
	ctx := d.Ctx
	ns := CP.Namespace(t)
	BindControllerSecrets(ctx, t, ns)
	const endpointIP = "127.0.3.104"
	ports, err := proc.FreePorts(endpointIP, 1)
	if err != nil {
		t.Fatal(err)
	}
	node := SimNode(t, talossim.Options{
		ListenAddress: "127.0.3.31:0", Kubernetes: d.Kube, Etcd: &talossim.EtcdCluster{Name: "spare"}, Trustd: d.Trustd,
		InstallDelay: 200 * time.Millisecond, RebootDelay: 200 * time.Millisecond, Registry: d.Registry,
	})
	if out, err := CP.KubectlWithInput(ctx, []byte(fmt.Sprintf(`apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: spare, namespace: %[1]s}
spec:
  talosVersion: v1.13.0
  kubernetesVersion: v1.36.0
  controlPlane: {endpoint: "https://%[2]s:%[3]d"}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: spare-cp-1, namespace: %[1]s}
spec: {clusterName: spare, role: controlplane, address: "%[4]s", hostname: spare-cp-1, install: {disk: /dev/sda}}
`, ns, endpointIP, ports[0], node.Addr())), append(Operator, "apply", "-f", "-")...); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	m := WaitMachine(ctx, t, ns, "spare-cp-1", "pinned", PinnedTo(node.MaintenanceFingerprint()))
	m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved}
	if _, err := APIClientFor(t, CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosMachines(ns).UpdateApproval(ctx, m.Name, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	WaitClusterFor(ctx, t, ns, "spare", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	return ns, node
}

// WaitReclaim waits until the reclaim reaches phase.
func WaitReclaim(ctx context.Context, t *testing.T, c ichorv1.MachineReclaimInterface, name string, phase v1alpha1.ReclaimPhase) *v1alpha1.MachineReclaim {
	t.Helper()
	return WaitReclaimFor(ctx, t, c, name, phase, time.Minute)
}

func WaitReclaimFor(ctx context.Context, t *testing.T, c ichorv1.MachineReclaimInterface, name string, phase v1alpha1.ReclaimPhase, within time.Duration) *v1alpha1.MachineReclaim {
	t.Helper()
	var r *v1alpha1.MachineReclaim
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		var err error
		r, err = c.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if phase != v1alpha1.ReclaimFailed && r.Status.Phase == v1alpha1.ReclaimFailed {
			return false, fmt.Errorf("failed: %v", r.Status.Conditions)
		}
		return r.Status.Phase == phase, nil
	})
	if err != nil {
		desc := "<none>"
		if r != nil {
			desc = fmt.Sprintf("%s %v", r.Status.Phase, r.Status.Conditions)
		}
		t.Fatalf("MachineReclaim %s never reached %s: %v; it is %s", name, phase, err, desc)
	}
	return r
}

func ExpectReclaimCondition(t *testing.T, r *v1alpha1.MachineReclaim, condType, reason, text string) {
	t.Helper()
	c := meta.FindStatusCondition(r.Status.Conditions, condType)
	if c == nil || c.Reason != reason || !strings.Contains(c.Message, text) {
		t.Errorf("MachineReclaim %s: condition %s = %+v, want reason %s saying %q", r.Name, condType, c, reason, text)
	}
}
