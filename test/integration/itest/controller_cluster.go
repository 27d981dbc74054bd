package itest

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	authnv1 "k8s.io/api/authentication/v1"
	authv1 "k8s.io/api/authorization/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.yaml.in/yaml/v4"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	ichorv1 "ichor.dev/ichor/pkg/generated/clientset/versioned/typed/ichor/v1alpha1"
	ksdecide "ichor.dev/ichor/pkg/kubeletserving"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/talossim"
)

// ClusterWait bounds a whole cluster's way to Ready: installs, reboots, a
// real kube-apiserver and kubelet TLS bootstrap, under -race on 2 cores.
const ClusterWait = 5 * time.Minute

// Operator is the user the cluster tests act as: in the ichor:operator group, nothing more.
var Operator = []string{"--as=olivia", "--as-group=ichor:operator"}

// Viewer is a user who may only read.
var Viewer = []string{"--as=victor", "--as-group=ichor:viewer"}

// Admin is the user for what only admins may do, like deleting a machine (which resets its node).
var Admin = []string{"--as=carol", "--as-group=ichor:admin"}

// DemoCluster is the cluster TestControllerBuildsACluster builds, and what
// its steps share: three control planes and two workers on simulated Talos
// nodes with a real Kubernetes control plane, approved with kubectl as the
// README shows; a rejected machine and an impostor of another cluster; the
// controller that manages them (a step restarts it); and the helpers the
// patch steps use.
type DemoCluster struct {
	Parent     *testing.T
	Ctx        context.Context
	Ns         string
	Tune       func(*ctrlcmd.Options)
	Controller *RunningController
	Kube       *talossim.Kubernetes
	Endpoint   string
	Etcd       *talossim.EtcdCluster
	Trustd     *talossim.Trustd
	Roles      map[string]v1alpha1.MachineRole
	Nodes      map[string]*talossim.Node
	Names      []string // demo's machines, workers first
	Rejected   *talossim.Node
	Impostor   *talossim.Node
	Machines   ichorv1.TalosMachineInterface
	Patches    ichorv1.TalosConfigPatchInterface
	// Registry is what the nodes can pull; nil: every installer of a Talos version.
	Registry *talossim.Registry
	// Rejoining is the node a deleted machine left, which a later step adds again.
	Rejoining *talossim.Node
	// BackupVolumeDir is the controller's --backup-volume-dir.
	BackupVolumeDir string
	// ScheduleClock is the clock the controller runs backup schedules on.
	ScheduleClock *clocktesting.FakeClock
	// TalosVersion is the cluster's spec.talosVersion, which its nodes run.
	TalosVersion string
}

// NewDemoCluster builds demo: every machine pinned and decided.
func NewDemoCluster(t *testing.T) *DemoCluster { return NewDemoClusterWith(t, DemoSetup{}) }

// DemoSetup is what a test changes of demo's set-up.
type DemoSetup struct {
	// Tune changes the controller's options after demo's own.
	Tune func(*ctrlcmd.Options)
	// Registry is what the nodes can pull; nil: every installer of a Talos version.
	Registry *talossim.Registry
	// KubernetesVersion demo is created at; default v1.36.0.
	KubernetesVersion string
	// TalosVersion demo is created at and its nodes run; default
	// talossim.DefaultVersion (v1.13.0).
	TalosVersion string
	// RealEtcdSnapshots makes etcd snapshots those of the real etcd behind
	// demo's kube-apiserver, which a restore brings back, instead of
	// generated ones of snapshotSize.
	RealEtcdSnapshots bool
	// DiskEncryption encrypts demo's disks with this key; a tpm key
	// gives the nodes SecureBoot, which enrolling one asks for.
	DiskEncryption v1alpha1.DiskEncryptionKey
}

// NewDemoClusterWith builds demo with setup's changes.
func NewDemoClusterWith(t *testing.T, setup DemoSetup) *DemoCluster {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	t.Cleanup(cancel)
	InstallControllerRBAC(ctx, t)
	// The operator places machines on the loopback addresses below; an admin
	// made them a provisioning network.
	UseProvisioningNetworks(ctx, t, "127.0.3.0/24")
	ns := CP.Namespace(t)
	BindControllerSecrets(ctx, t, ns)
	backupVolumeDir := t.TempDir()
	// Schedules run on a clock the test moves: a step that waits for a
	// scheduled backup moves it to the run's minute instead of waiting.
	scheduleClock := clocktesting.NewFakeClock(time.Now())
	tune := func(o *ctrlcmd.Options) {
		o.BackupVolumeDir = backupVolumeDir
		o.ScheduleClock = scheduleClock
		o.MachineRecheckInterval = time.Second
		o.MachineHealthInterval = 2 * time.Second
		o.MachineContactTimeout = 5 * time.Second
		// Kubelet serving requests must be seen through the watch, not a timer.
		o.KubeletServingPollInterval = time.Hour
		o.CredentialRequestRetention = CredentialRetention
		if setup.Tune != nil {
			setup.Tune(o)
		}
	}
	parent := t
	controller := RunController(t, tune)
	WaitHTTP(ctx, t, "http://"+controller.Probes+"/readyz")

	binDir, err := harness.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kube := &talossim.Kubernetes{BinDir: binDir, Dir: t.TempDir(), Logf: t.Logf}
	t.Cleanup(kube.Stop)
	KeepLogsOnFailure(t, kube.Dir)
	const endpointIP = "127.0.3.100"
	ports, err := proc.FreePorts(endpointIP, 1)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := fmt.Sprintf("https://%s:%d", endpointIP, ports[0])

	etcd, trustd := &talossim.EtcdCluster{Name: "demo", SnapshotSize: SnapshotSize}, talossim.NewTrustd()
	if setup.RealEtcdSnapshots {
		etcd.SnapshotSize = 0
	}
	roles := map[string]v1alpha1.MachineRole{
		"cp-1": v1alpha1.MachineRoleControlPlane, "cp-2": v1alpha1.MachineRoleControlPlane, "cp-3": v1alpha1.MachineRoleControlPlane,
		"worker-1": v1alpha1.MachineRoleWorker, "worker-2": v1alpha1.MachineRoleWorker,
	}
	nodes := map[string]*talossim.Node{}
	manifest := fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: demo, namespace: %s}
spec:
  talosVersion: %s
  kubernetesVersion: %s
  controlPlane: {endpoint: "%s"}
`, ns, cmp.Or(setup.TalosVersion, talossim.DefaultVersion), cmp.Or(setup.KubernetesVersion, "v1.36.0"), endpoint)
	if setup.DiskEncryption != "" {
		manifest += fmt.Sprintf("  security: {diskEncryption: {key: %s}}\n", setup.DiskEncryption)
	}
	i := 0
	for _, name := range []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"} {
		i++
		opts := talossim.Options{
			ListenAddress: fmt.Sprintf("127.0.3.%d:0", i), Kubernetes: kube, Etcd: etcd, Trustd: trustd,
			InstallDelay: 200 * time.Millisecond, RebootDelay: 200 * time.Millisecond, Registry: setup.Registry,
			SecureBoot: setup.DiskEncryption == v1alpha1.DiskEncryptionKeyTPM, Version: setup.TalosVersion,
		}
		if name == "worker-2" { // a user disk, for node-reset's user-disks
			opts.Disks = []talossim.Disk{{Path: "/dev/sda", Size: 10 << 30}, {Path: "/dev/sdb", Size: 20 << 30}}
		}
		nodes[name] = SimNode(t, opts)
		manifest += fmt.Sprintf(`---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: %s, namespace: %s}
spec: {clusterName: demo, role: %s, address: "%s", hostname: %s, install: {disk: /dev/sda}}
`, name, ns, roles[name], nodes[name].Addr(), name)
	}
	// The rejected machine and the impostor belong to another cluster, so
	// that they do not hold demo back.
	rejected := SimNode(t, talossim.Options{ListenAddress: "127.0.3.20:0"})
	impostor := SimNode(t, talossim.Options{ListenAddress: "127.0.3.21:0"})
	manifest += fmt.Sprintf(`---
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: other, namespace: %[1]s}
spec:
  talosVersion: v1.13.0
  kubernetesVersion: v1.36.0
  controlPlane: {endpoint: "https://127.0.3.101:6443"}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: rejected, namespace: %[1]s}
spec: {clusterName: other, role: controlplane, address: "%[2]s", install: {disk: /dev/sda}}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: impostor, namespace: %[1]s}
spec: {clusterName: other, role: controlplane, address: "%[3]s", install: {disk: /dev/sda}}
`, ns, rejected.Addr(), impostor.Addr())
	if out, err := CP.KubectlWithInput(ctx, []byte(manifest), append(Operator, "apply", "-f", "-")...); err != nil {
		t.Fatalf("kubectl apply as an operator: %v\n%s", err, out)
	}

	machines := APIClientFor(t, CP.ConfigFor("olivia", "ichor:operator")).IchorV1alpha1().TalosMachines(ns)
	patches := APIClientFor(t, CP.ConfigFor("olivia", "ichor:operator")).IchorV1alpha1().TalosConfigPatches(ns)
	// Workers first: once the cluster is bootstrapped, approving any machine is an admin's.
	names := slices.Sorted(maps.Keys(nodes))
	slices.SortStableFunc(names, func(a, b string) int { return strings.Compare(string(roles[b]), string(roles[a])) })
	d := &DemoCluster{
		Parent: parent, Ctx: ctx, Ns: ns, Tune: tune, ScheduleClock: scheduleClock, Controller: controller, Kube: kube, Endpoint: endpoint,
		Etcd: etcd, Trustd: trustd, Roles: roles, Nodes: nodes, Names: names, Rejected: rejected, Impostor: impostor,
		Machines: machines, Patches: patches, Registry: setup.Registry, BackupVolumeDir: backupVolumeDir,
		TalosVersion: cmp.Or(setup.TalosVersion, talossim.DefaultVersion),
	}

	// What the controller pinned is approved with kubectl and the approval
	// subresource, as the README shows: workers by the operator, control
	// planes (whose configs hold every CA key) by an admin.
	for _, name := range names {
		n := nodes[name]
		WaitMachine(ctx, t, ns, name, "pinned", PinnedTo(n.MaintenanceFingerprint()))
		if roles[name] != v1alpha1.MachineRoleControlPlane {
			d.DecideAs(t, Operator, "olivia", name, v1alpha1.ApprovalApproved, "")
			continue
		}
		out, err := CP.Kubectl(ctx, append(Operator, d.Approval(t, name, v1alpha1.ApprovalApproved, "")...)...)
		if msg := fmt.Sprint(err, out); err == nil || !strings.Contains(msg, "talosmachines/privileged-approval") && !strings.Contains(msg, `subresource "privileged-approval"`) {
			t.Fatalf("an operator's approval of control plane %s: %v\n%s", name, err, out)
		}
		d.DecideAs(t, Admin, "carol", name, v1alpha1.ApprovalApproved, "")
	}
	WaitMachine(ctx, t, ns, "rejected", "pinned", PinnedTo(rejected.MaintenanceFingerprint()))
	d.DecideAs(t, Operator, "olivia", "rejected", v1alpha1.ApprovalRejected, "not ours")
	// An impostor takes the pinned machine's address before it is approved:
	// the controller must send it nothing.
	WaitMachine(ctx, t, ns, "impostor", "pinned", PinnedTo(impostor.MaintenanceFingerprint()))
	if err := impostor.SetFaults(talossim.Faults{Impostor: true}); err != nil {
		t.Fatal(err)
	}
	d.DecideAs(t, Admin, "carol", "impostor", v1alpha1.ApprovalApproved, "")
	return d
}

// Approval is the kubectl arguments that decide a machine through its approval subresource.
func (d *DemoCluster) Approval(t *testing.T, name string, decision v1alpha1.ApprovalDecision, reason string) []string {
	t.Helper()
	body, err := json.Marshal(map[string]any{"status": map[string]any{"approval": v1alpha1.ApprovalStatus{Decision: decision, Reason: reason}}})
	if err != nil {
		t.Fatal(err)
	}
	return []string{"-n", d.Ns, "patch", "talosmachine", name, "--subresource=approval", "--type=merge", "-p", string(body)}
}

// DecideAs decides a machine as who, and checks the decision is recorded as by's.
func (d *DemoCluster) DecideAs(t *testing.T, who []string, by, name string, decision v1alpha1.ApprovalDecision, reason string) {
	t.Helper()
	MustKubectl(d.Ctx, t, append(who, d.Approval(t, name, decision, reason)...)...)
	m := WaitMachine(d.Ctx, t, d.Ns, name, "decided", func(m *v1alpha1.TalosMachine) bool { return m.Status.Approval != nil })
	if a := m.Status.Approval; a.Decision != decision || a.By != by || a.Reason != reason {
		t.Fatalf("%s: approval %+v", name, a)
	}
}

// ApplyPatch applies a TalosConfigPatch of demo as the operator.
func (d *DemoCluster) ApplyPatch(t *testing.T, name, patch string) {
	t.Helper()
	MustApply(d.Ctx, t, fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosConfigPatch
metadata: {name: %s, namespace: %s}
spec:
  clusterName: demo
  patch: |
%s
`, name, d.Ns, Indent(patch, "    ")))
}

// RolledOut waits until every machine applied a config other than
// before's and is Ready again, and returns the new hashes.
func (d *DemoCluster) RolledOut(t *testing.T, before map[string]string) map[string]string {
	t.Helper()
	after := map[string]string{}
	for name := range d.Nodes {
		m := WaitMachineFor(d.Ctx, t, d.Ns, name, ClusterWait, "the patch is rolled out", func(m *v1alpha1.TalosMachine) bool {
			return m.Status.AppliedConfig != nil && m.Status.AppliedConfig.Hash != before[name] &&
				HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate) &&
				m.Status.Phase == v1alpha1.MachinePhaseReady
		})
		after[name] = m.Status.AppliedConfig.Hash
	}
	return after
}

// AppliedHashes is the hash of the config each machine runs.
func (d *DemoCluster) AppliedHashes(t *testing.T) map[string]string {
	t.Helper()
	hashes := map[string]string{}
	for name := range d.Nodes {
		m, err := d.Machines.Get(d.Ctx, name, metav1.GetOptions{})
		if err != nil || m.Status.AppliedConfig == nil {
			t.Fatalf("%s: %+v, %v", name, m, err)
		}
		hashes[name] = m.Status.AppliedConfig.Hash
	}
	return hashes
}

// PatchSettles waits until a patch's status says it is applied on all five machines with effect.
func (d *DemoCluster) PatchSettles(t *testing.T, name string, effect v1alpha1.ConfigEffect) {
	t.Helper()
	var last *v1alpha1.TalosConfigPatch
	err := wait.PollUntilContextTimeout(d.Ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		p, err := d.Patches.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return HasCondition(p.Status.Conditions, v1alpha1.PatchConditionApplied, metav1.ConditionTrue, v1alpha1.PatchReasonAllApplied) &&
			p.Status.ObservedGeneration == p.Generation, nil
	})
	if err != nil {
		t.Fatalf("patch %s never applied everywhere: %v; status %+v", name, err, last.Status)
	}
	if last.Status.Effect != effect || len(last.Status.AppliedMachines) != len(d.Nodes) ||
		!HasCondition(last.Status.Conditions, v1alpha1.PatchConditionValid, metav1.ConditionTrue, v1alpha1.PatchReasonRenders) {
		t.Errorf("patch %s status %+v, want effect %s on all machines", name, last.Status, effect)
	}
}

// ControlPlaneNodes are demo's control planes' nodes, by machine name.
func (d *DemoCluster) ControlPlaneNodes() map[string]*talossim.Node {
	out := map[string]*talossim.Node{}
	for n, role := range d.Roles {
		if role == v1alpha1.MachineRoleControlPlane {
			out[n] = d.Nodes[n]
		}
	}
	return out
}

// Reboots is how many times each of demo's nodes rebooted.
func (d *DemoCluster) Reboots() map[string]int {
	counts := map[string]int{}
	for name, n := range d.Nodes {
		counts[name] = TimesEntered(n, talossim.PhaseRebooting)
	}
	return counts
}

// BootstrapAccess is the workload cluster's admin configuration and demo's
// bootstrap token, for the bootstrap token steps.
// The bootstrap token is in every worker config; whoever holds one must
// not get a kubelet certificate for another node's name once the machines
// joined (docs/trust-model.md).
func (d *DemoCluster) BootstrapAccess(t *testing.T) (*rest.Config, string) {
	t.Helper()
	rc, err := d.Kube.WaitReady(d.Ctx, d.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return rc, BootstrapTokenOf(d.Ctx, t, d.Ns, "demo")
}

// AdminTalosconfig writes an os:admin talosconfig of demo signed from its
// bundle (read as the management cluster's admin, as a break-glass holder
// would: Ichor hands out reader talosconfigs only) and returns its path.
func (d *DemoCluster) AdminTalosconfig(t *testing.T) string {
	t.Helper()
	c := GetCluster(t, d.Ns, "demo")
	s, err := kubernetes.NewForConfigOrDie(CP.AdminConfig).CoreV1().Secrets(d.Ns).Get(d.Ctx, secretsbundle.SecretName(c), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := secretsbundle.Parse(s.Data[secretsbundle.BundleKey])
	if err != nil {
		t.Fatal(err)
	}
	cert, err := secrets.NewAdminCertificateAndKey(time.Now(), bundle.Certs.OS, role.MakeSet(role.Admin), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, err := clientconfig.NewConfig("demo", []string{d.Nodes["cp-1"].Addr()}, bundle.Certs.OS.Crt, cert).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "talosconfig")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// ConfigsOfItsLayout: the official talosctl of each node's version reads,
// as os:admin, every node's config, laid out as the cluster's contract has it: the
// kubelet in a KubeletConfig document from v1.14 on, in machine.kubelet
// before.
func (d *DemoCluster) ConfigsOfItsLayout(t *testing.T) {
	talosconfig := d.AdminTalosconfig(t)
	multidoc := !strings.HasPrefix(d.TalosVersion, "v1.13.")
	for _, name := range d.Names {
		out, err := TalosctlOn(d.Ctx, t, d.Nodes[name])(talosconfig, "get", "machineconfig", "-o", "yaml")
		if err != nil {
			t.Fatalf("%s: talosctl get machineconfig: %v\n%s", name, err, out)
		}
		var res struct {
			Spec string `yaml:"spec"`
		}
		if err := yaml.Unmarshal([]byte(out), &res); err != nil || res.Spec == "" {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if got := strings.Contains(res.Spec, "kind: KubeletConfig\n"); got != multidoc {
			t.Errorf("%s (Talos %s): a KubeletConfig document is %t, want %t\n%s", name, d.TalosVersion, got, multidoc, res.Spec)
		}
		if got := strings.Contains(res.Spec, "\n    kubelet:\n"); got == multidoc {
			t.Errorf("%s (Talos %s): a machine.kubelet section is %t, want %t", name, d.TalosVersion, got, !multidoc)
		}
	}
}

// becomesReady: three control planes and two workers become Ready.
func (d *DemoCluster) BecomesReady(t *testing.T) {
	ctx := d.Ctx
	c := WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	if got, want := c.Status.Machines, (v1alpha1.MachineCounts{Total: 5, Ready: 5, ControlPlanes: 3, Workers: 2}); got != want {
		t.Errorf("machine counts %+v, want %+v", got, want)
	}
	if c.Status.Phase != v1alpha1.ClusterPhaseReady || c.Status.BootstrappedAt == nil || c.Status.TalosVersion != d.TalosVersion ||
		c.Status.KubernetesVersion == "" || c.Status.ObservedGeneration != c.Generation {
		t.Errorf("status %+v", c.Status)
	}
	for _, typ := range []string{v1alpha1.ClusterConditionBootstrapped, v1alpha1.ClusterConditionEtcdHealthy,
		v1alpha1.ClusterConditionKubernetesAPIReachable, v1alpha1.ClusterConditionMachinesReady, v1alpha1.ClusterConditionNodesReady} {
		if !meta.IsStatusConditionTrue(c.Status.Conditions, typ) {
			t.Errorf("condition %s not True: %+v", typ, meta.FindStatusCondition(c.Status.Conditions, typ))
		}
	}
	// Exactly one bootstrap: one etcd cluster with three voting members.
	members := d.Etcd.Members()
	if len(members) != 3 {
		t.Errorf("etcd members %+v, want the three control planes", members)
	}
	WaitEvent(ctx, t, d.Ns, "demo", corev1.EventTypeNormal, v1alpha1.EventBootstrapped)
	WaitEvent(ctx, t, d.Ns, "demo", corev1.EventTypeNormal, v1alpha1.EventClusterReady)

	for name, n := range d.Nodes {
		m, err := d.Machines.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if m.Status.Phase != v1alpha1.MachinePhaseReady || m.Status.NodeName != name || m.Status.AppliedConfig == nil ||
			!HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate) {
			t.Errorf("%s: %+v", name, DescribeStatus(m))
		}
		if n.Phase() != talossim.PhaseRunning {
			t.Errorf("%s: node phase %s", name, n.Phase())
		}
		e := WaitEvent(ctx, t, d.Ns, name, corev1.EventTypeNormal, v1alpha1.EventConfigApplied)
		if !strings.Contains(e.Message, "pinned certificate") {
			t.Errorf("%s: install Event %q", name, e.Message)
		}
	}

	// The workload cluster: every kubelet registered, and the controller's
	// identity there holds its own role and not more.
	rc, err := d.Kube.WaitReady(ctx, d.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	wl := kubernetes.NewForConfigOrDie(rc)
	var nodeNames []string
	err = wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		list, err := wl.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		nodeNames = nodeNames[:0]
		for _, n := range list.Items {
			nodeNames = append(nodeNames, n.Name)
		}
		return len(nodeNames) == 5, nil
	})
	if err != nil {
		t.Errorf("workload nodes %v: %v", nodeNames, err)
	}
	binding, err := wl.RbacV1().ClusterRoleBindings().Get(ctx, "ichor:controller", metav1.GetOptions{})
	if err != nil || len(binding.Subjects) != 1 || binding.Subjects[0].Name != "ichor:controller" {
		t.Errorf("controller binding in the workload cluster: %+v, %v", binding, err)
	}

	// kubectl shows it as users see it.
	out := MustKubectl(ctx, t, append(Operator, "get", "talosclusters", "-n", d.Ns, "demo")...)
	if !strings.Contains(out, "Ready") {
		t.Errorf("kubectl get talosclusters:\n%s", out)
	}
}

// noRebootPatch: a no-reboot patch applies everywhere without a reboot.
func (d *DemoCluster) NoRebootPatch(t *testing.T) {
	ctx := d.Ctx
	before, rebootsBefore := d.AppliedHashes(t), d.Reboots()
	d.ApplyPatch(t, "sysctls", "machine:\n  sysctls:\n    net.core.somaxconn: \"65535\"")
	after := d.RolledOut(t, before)
	d.PatchSettles(t, "sysctls", v1alpha1.ConfigEffectNoReboot)
	if got := d.Reboots(); fmt.Sprint(got) != fmt.Sprint(rebootsBefore) {
		t.Errorf("reboots went from %v to %v", rebootsBefore, got)
	}
	for name := range d.Nodes {
		m, _ := d.Machines.Get(ctx, name, metav1.GetOptions{})
		if m.Status.AppliedConfig.Hash != after[name] || m.Status.AppliedConfig.Effect != v1alpha1.ConfigEffectNoReboot {
			t.Errorf("%s: applied %+v", name, m.Status.AppliedConfig)
		}
	}
}

// rebootPatch: a reboot-required patch reboots one node at a time.
func (d *DemoCluster) RebootPatch(t *testing.T) {
	ctx := d.Ctx
	before, rebootsBefore, since := d.AppliedHashes(t), d.Reboots(), time.Now()
	d.ApplyPatch(t, "env", "machine:\n  env:\n    ICHOR_TEST: \"1\"")
	d.RolledOut(t, before)
	if most, when := MostAwayAtOnce(d.Nodes, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
	}
	RebootedOnce(t, rebootsBefore, d.Reboots())
	d.PatchSettles(t, "env", v1alpha1.ConfigEffectReboot)
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
}

// badPatch: a bad patch reports its error and changes nothing.
func (d *DemoCluster) BadPatch(t *testing.T) {
	ctx := d.Ctx
	before := d.AppliedHashes(t)
	d.ApplyPatch(t, "broken", "machine:\n  kubelet:\n    nodeIP:\n      validSubnets: [not-a-cidr]")
	for name := range d.Nodes {
		m := WaitMachine(ctx, t, d.Ns, name, "the render error is reported", func(m *v1alpha1.TalosMachine) bool {
			return HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonRenderFailed)
		})
		if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied); !strings.Contains(c.Message, "broken") {
			t.Errorf("%s: the error does not name the patch: %s", name, c.Message)
		}
	}
	WaitEvent(ctx, t, d.Ns, "cp-1", corev1.EventTypeWarning, v1alpha1.EventConfigFailed)
	err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		p, err := d.Patches.Get(ctx, "broken", metav1.GetOptions{})
		return err == nil && HasCondition(p.Status.Conditions, v1alpha1.PatchConditionValid, metav1.ConditionFalse, string(render.PatchInvalidResult)) &&
			len(p.Status.AppliedMachines) == 0, nil
	})
	if err != nil {
		t.Errorf("the broken patch's status does not report it: %v", err)
	}
	if got := d.AppliedHashes(t); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("applied configs changed: %v -> %v", before, got)
	}
	if err := d.Patches.Delete(ctx, "broken", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for name := range d.Nodes {
		WaitMachine(ctx, t, d.Ns, name, "up to date again", func(m *v1alpha1.TalosMachine) bool {
			return HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate)
		})
	}
	if got := d.AppliedHashes(t); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("removing the bad patch changed configs: %v -> %v", before, got)
	}
}

// encryptionPatch: encrypting STATE is something Talos does only when it
// formats the volume; installed nodes are sent nothing, and say why.
func (d *DemoCluster) EncryptionPatch(t *testing.T) {
	ctx := d.Ctx
	// How each node booted, as it says: the simulated nodes enforce module
	// signatures and booted without SecureBoot.
	for name := range d.Nodes {
		m := WaitMachine(ctx, t, d.Ns, name, "its security state is recorded", func(m *v1alpha1.TalosMachine) bool { return m.Status.Security != nil })
		if sec := m.Status.Security; sec.SecureBoot || sec.BootedWithUKI || !sec.ModuleSignatureEnforced {
			t.Errorf("%s: security %+v", name, sec)
		}
	}
	before := d.AppliedHashes(t)
	d.ApplyPatch(t, "encrypt-state", "apiVersion: v1alpha1\nkind: VolumeConfig\nname: STATE\nencryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      nodeID: {}\n")
	for name := range d.Nodes {
		m := WaitMachine(ctx, t, d.Ns, name, "a reset is asked for", func(m *v1alpha1.TalosMachine) bool {
			return HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonResetRequired)
		})
		if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied); !strings.Contains(c.Message, "VolumeConfig/STATE:encryption") ||
			!strings.Contains(c.Message, "node-reset") {
			t.Errorf("%s: the condition does not say what and what to do: %s", name, c.Message)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		p, err := d.Patches.Get(ctx, "encrypt-state", metav1.GetOptions{})
		return err == nil && HasCondition(p.Status.Conditions, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonResetRequired), nil
	})
	if err != nil {
		t.Errorf("the patch's status does not say it waits for a reset: %v", err)
	}
	if got := d.AppliedHashes(t); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("applied configs changed: %v -> %v", before, got)
	}
	// A VolumeConfig is a privileged patch: an operator may not take it
	// back either.
	if err := d.Patches.Delete(ctx, "encrypt-state", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "talosconfigpatches/privileged") {
		t.Errorf("an operator's delete of a VolumeConfig patch: %v, want Forbidden naming talosconfigpatches/privileged", err)
	}
	admins := APIClientFor(t, CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosConfigPatches(d.Ns)
	if err := admins.Delete(ctx, "encrypt-state", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for name := range d.Nodes {
		WaitMachine(ctx, t, d.Ns, name, "up to date again", func(m *v1alpha1.TalosMachine) bool {
			return HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate)
		})
	}
}

// restartMidRollout: a controller restarted mid-rollout resumes without repeating or skipping a step.
func (d *DemoCluster) RestartMidRollout(t *testing.T) {
	ctx := d.Ctx
	before, rebootsBefore, since := d.AppliedHashes(t), d.Reboots(), time.Now()
	d.ApplyPatch(t, "env-restart", "machine:\n  env:\n    ICHOR_RESTART: \"1\"")
	// Stop the controller in the middle of a step: a node is away, which
	// only the machine holding the disruption budget may be. The nodes are
	// watched in-process: a reboot is shorter than an API round trip on a
	// loaded machine.
	var away string
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, ControllerWait, true, func(context.Context) (bool, error) {
		for name, n := range d.Nodes {
			if n.Phase() != talossim.PhaseRunning {
				away = name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no node was seen away: %v", err)
	}
	d.Controller.Stop()
	c, err := APIClient(t).IchorV1alpha1().TalosClusters(d.Ns).Get(ctx, "demo", metav1.GetOptions{})
	if err != nil || c.Status.Disruption == nil || c.Status.Disruption.Machine != away {
		t.Fatalf("the budget with the controller stopped while %s was away: %+v, %v; want %s's", away, c.Status.Disruption, err, away)
	}
	holder := c.Status.Disruption
	t.Logf("stopped the controller while %s holds the budget for %s", holder.Machine, holder.Action)
	if out := MustKubectl(ctx, t, append(Operator, "get", "taloscluster", "-n", d.Ns, "demo")...); !strings.Contains(out, holder.Machine+" ("+string(holder.Action)+")") {
		t.Errorf("kubectl get does not show the budget's holder:\n%s", out)
	}
	d.Controller = RunController(d.Parent, d.Tune) // it outlives this subtest
	d.RolledOut(t, before)
	if most, when := MostAwayAtOnce(d.Nodes, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
	}
	RebootedOnce(t, rebootsBefore, d.Reboots())
	WaitBudgetFree(ctx, t, d.Ns, "demo")
}

// kubeletServing: kubelet serving certificates are approved after checking each node's Talos API.
func (d *DemoCluster) KubeletServing(t *testing.T) {
	ctx := d.Ctx
	MustKubectl(ctx, t, append(Operator, "-n", d.Ns, "patch", "taloscluster", "demo", "--type=merge", "-p",
		`{"spec":{"security":{"kubeletServingCertificates":{"enabled":true,"verifyFromAPIServer":true}}}}`)...)
	for name := range d.Nodes {
		WaitMachineFor(ctx, t, d.Ns, name, ClusterWait, "its serving certificate is recorded", func(m *v1alpha1.TalosMachine) bool {
			c := m.Status.KubeletServingCertificate
			return c != nil && c.Request != "" && c.NotAfter != nil && c.NotAfter.After(time.Now())
		})
	}
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionTrue, v1alpha1.ClusterReasonAllIssued)
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionKubeletServingVerified, metav1.ConditionTrue, v1alpha1.ClusterReasonAllIssued)
	// The latch has the control planes' kube-apiservers verify kubelets: an
	// API server restart, rolled one control plane at a time.
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		WaitMachineFor(ctx, t, d.Ns, name, ClusterWait, "its kube-apiserver verifies kubelets", func(m *v1alpha1.TalosMachine) bool {
			return m.Status.AppliedConfig != nil && m.Status.AppliedConfig.Effect == v1alpha1.ConfigEffectAPIServerRestart &&
				m.Status.Phase == v1alpha1.MachinePhaseReady
		})
	}
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)

	rc, err := d.Kube.WaitReady(ctx, d.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	wl := kubernetes.NewForConfigOrDie(rc)
	csrs, err := wl.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approved := map[string]bool{}
	for _, csr := range csrs.Items {
		for _, c := range csr.Status.Conditions {
			if csr.Spec.SignerName == certv1.KubeletServingSignerName && c.Type == certv1.CertificateApproved {
				if c.Reason != ksdecide.ReasonApproved {
					t.Errorf("%s approved with reason %q", csr.Name, c.Reason)
				}
				approved[csr.Spec.Username] = true
			}
		}
	}
	if len(approved) != len(d.Nodes) {
		t.Errorf("approved serving requests of %v, want one per node", approved)
	}

	// The kubelet now serves a certificate the cluster CA vouches for, for its own address.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rc.CAData)
	node, err := wl.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := HostOf(d.Nodes["cp-1"])
	conn, err := tls.Dial("tcp", fmt.Sprintf("%s:%d", ip, node.Status.DaemonEndpoints.KubeletEndpoint.Port),
		&tls.Config{RootCAs: pool, ServerName: ip, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Errorf("the kubelet's serving certificate does not verify against the cluster CA: %v", err)
	} else {
		_ = conn.Close()
	}

	// Requests a kubelet should not make: as node cp-1 asking for a
	// neighbour's address (denied), as a node Ichor does not manage (left
	// pending), and to another signer (untouched).
	asNode := func(name string) kubernetes.Interface {
		return kubernetes.NewForConfigOrDie(AsNodeConfig(rc, name))
	}
	create := func(as kubernetes.Interface, name, node, signer string, ips ...string) {
		t.Helper()
		_, err := as.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certv1.CertificateSigningRequestSpec{
				Request: ServingRequestPEM(t, node, ips...), SignerName: signer,
				Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create CSR %s: %v", name, err)
		}
	}
	neighbour := HostOf(d.Nodes["cp-2"])
	// cp-3's Talos API does not answer: its (good) request must wait.
	if err := d.Nodes["cp-3"].SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	cp3 := HostOf(d.Nodes["cp-3"])
	create(asNode("cp-3"), "unreadable", "cp-3", certv1.KubeletServingSignerName, cp3)
	create(asNode("ghost"), "ghost", "ghost", certv1.KubeletServingSignerName, "127.0.3.99")
	create(asNode("cp-1"), "other-signer", "cp-1", "example.com/serving", ip)
	create(asNode("cp-1"), "neighbour-ip", "cp-1", certv1.KubeletServingSignerName, ip, neighbour)
	var denied *certv1.CertificateSigningRequestCondition
	err = wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		csr, err := wl.CertificatesV1().CertificateSigningRequests().Get(ctx, "neighbour-ip", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range csr.Status.Conditions {
			if c.Type == certv1.CertificateDenied {
				denied = &c
			}
		}
		return denied != nil, nil
	})
	if err != nil || denied.Reason != ksdecide.ReasonUnknownIPAddress || !strings.Contains(denied.Message, neighbour) {
		t.Errorf("the request for a neighbour's IP: %+v, %v", denied, err)
	}
	WaitEvent(ctx, t, d.Ns, "cp-1", corev1.EventTypeWarning, v1alpha1.EventKubeletServingDenied)
	for _, name := range []string{"ghost", "other-signer", "unreadable"} {
		csr, err := wl.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(csr.Status.Conditions) != 0 {
			t.Errorf("%s was decided: %+v, %v", name, csr.Status.Conditions, err)
		}
	}
	// Once cp-3 answers again its request is checked and approved.
	d.Nodes["cp-3"].ClearFaults()
	err = wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		csr, err := wl.CertificatesV1().CertificateSigningRequests().Get(ctx, "unreadable", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range csr.Status.Conditions {
			if c.Type == certv1.CertificateApproved && c.Reason == ksdecide.ReasonApproved {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("cp-3's request once its Talos API answers: %v", err)
	}
	WaitMachine(ctx, t, d.Ns, "cp-3", "Ready again", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseReady
	})

	// In the workload cluster the controller may approve kubelet serving
	// requests and nothing else on certificates.k8s.io.
	for _, c := range []struct {
		attrs authv1.ResourceAttributes
		want  bool
	}{
		{authv1.ResourceAttributes{Group: "certificates.k8s.io", Resource: "signers", Name: certv1.KubeletServingSignerName, Verb: "approve"}, true},
		{authv1.ResourceAttributes{Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Subresource: "approval", Verb: "update"}, true},
		{authv1.ResourceAttributes{Group: "certificates.k8s.io", Resource: "signers", Name: "example.com/serving", Verb: "approve"}, false},
		{authv1.ResourceAttributes{Group: "certificates.k8s.io", Resource: "signers", Name: certv1.KubeletServingSignerName, Verb: "sign"}, false},
		{authv1.ResourceAttributes{Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Verb: "create"}, false},
		{authv1.ResourceAttributes{Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Verb: "delete"}, false},
		{authv1.ResourceAttributes{Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Subresource: "status", Verb: "update"}, false},
		{authv1.ResourceAttributes{Resource: "secrets", Verb: "get"}, false},
	} {
		sar, err := wl.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{
			User: "ichor:controller", ResourceAttributes: &c.attrs,
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != c.want {
			t.Errorf("ichor:controller %s %s/%s %s: allowed %t, want %t", c.attrs.Verb, c.attrs.Resource, c.attrs.Subresource, c.attrs.Name, sar.Status.Allowed, c.want)
		}
	}
}

// credentialRequests: Talos credential requests are signed for the least role, or denied, and deleted.
func (d *DemoCluster) CredentialRequests(t *testing.T) {
	CheckCredentialRequests(d.Ctx, t, d.Ns, d.Nodes["worker-1"])
}

// etcdSnapshot: an etcd snapshot streams through kube-apiserver and ichor-apiserver.
func (d *DemoCluster) EtcdSnapshot(t *testing.T) {
	CheckEtcdSnapshotDownload(d.Ctx, t, d.Ns, d.Etcd)
}

// supportBundle: a support bundle streams as a zip archive.
func (d *DemoCluster) SupportBundle(t *testing.T) {
	CheckSupportBundleDownload(d.Ctx, t, d.Ns)
}

// packetCapture: a packet capture streams as a pcap file for its duration.
func (d *DemoCluster) PacketCapture(t *testing.T) {
	CheckPacketCaptureDownload(d.Ctx, t, d.Ns)
}

// packetCaptureCut: a packet capture the node cuts fails for the client instead of ending short.
func (d *DemoCluster) PacketCaptureCut(t *testing.T) {
	CheckCutPacketCapture(d.Ctx, t, d.Ns, d.Nodes["worker-1"])
}

// readerTalosconfig: a reader talosconfig works with talosctl and reads only.
func (d *DemoCluster) ReaderTalosconfig(t *testing.T) {
	CheckTalosconfigReaderDownload(d.Ctx, t, d.Ns, d.Nodes)
}

// quorumKeepsControlPlanes: deleting a control plane that would cost etcd its quorum is refused.
func (d *DemoCluster) QuorumKeepsControlPlanes(t *testing.T) {
	ctx := d.Ctx
	if err := d.Nodes["cp-3"].SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	WaitMachine(ctx, t, d.Ns, "cp-3", "noticed down", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseUnreachable
	})
	out, err := CP.Kubectl(ctx, append(Admin, "delete", "talosmachine", "-n", d.Ns, "cp-1", "--wait=false")...)
	if msg := fmt.Sprint(err, out); err == nil || !strings.Contains(msg, "Forbidden") ||
		!strings.Contains(msg, "quorum needs 2") || !strings.Contains(msg, "cp-3 (Unreachable)") {
		t.Errorf("kubectl delete of cp-1 with cp-3 down: %v\n%s", err, out)
	}
	if _, err := d.Machines.Get(ctx, "cp-1", metav1.GetOptions{}); err != nil {
		t.Errorf("cp-1 after the refused delete: %v", err)
	}
	d.Nodes["cp-3"].ClearFaults()
	WaitMachine(ctx, t, d.Ns, "cp-3", "Ready again", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseReady
	})
}

// bootstrapTokenClosed: the bootstrap token authenticates nobody once every machine joined.
func (d *DemoCluster) BootstrapTokenClosed(t *testing.T) {
	ctx := d.Ctx
	rc, token := d.BootstrapAccess(t)
	// A kubelet's first request at TLS bootstrap, for a control plane's name.
	_, err := RequestKubeletClientCertificate(ctx, rc, token, "cp-1")
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("a client certificate request for cp-1 with the bootstrap token: %v, want Unauthorized", err)
	}
	WaitCluster(ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionFalse, v1alpha1.ClusterReasonAllMachinesJoined)
	WaitEvent(ctx, t, d.Ns, "demo", corev1.EventTypeNormal, v1alpha1.EventBootstrapTokenDisabled)

	// What that takes in the cluster: the token's Secret alone, read and
	// patched, never created, listed or deleted.
	id, _, _ := strings.Cut(token, ".")
	wl := kubernetes.NewForConfigOrDie(rc)
	for _, c := range []struct {
		attrs authv1.ResourceAttributes
		want  bool
	}{
		{authv1.ResourceAttributes{Namespace: "kube-system", Resource: "secrets", Name: "bootstrap-token-" + id, Verb: "get"}, true},
		{authv1.ResourceAttributes{Namespace: "kube-system", Resource: "secrets", Name: "bootstrap-token-" + id, Verb: "patch"}, true},
		{authv1.ResourceAttributes{Namespace: "kube-system", Resource: "secrets", Name: "bootstrap-token-" + id, Verb: "delete"}, false},
		{authv1.ResourceAttributes{Namespace: "kube-system", Resource: "secrets", Name: "bootstrap-token-abcdef", Verb: "get"}, false},
		{authv1.ResourceAttributes{Namespace: "kube-system", Resource: "secrets", Verb: "create"}, false},
		{authv1.ResourceAttributes{Namespace: "kube-system", Resource: "secrets", Verb: "list"}, false},
		{authv1.ResourceAttributes{Namespace: "default", Resource: "secrets", Name: "bootstrap-token-" + id, Verb: "get"}, false},
	} {
		sar, err := wl.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{
			User: "ichor:controller", ResourceAttributes: &c.attrs,
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != c.want {
			t.Errorf("ichor:controller %s secrets %s/%s: allowed %t, want %t", c.attrs.Verb, c.attrs.Namespace, c.attrs.Name, sar.Status.Allowed, c.want)
		}
	}
}

// deleteResetsNode: deleting a machine resets its node first.
func (d *DemoCluster) DeleteResetsNode(t *testing.T) {
	ctx := d.Ctx
	node := d.Nodes["worker-2"]
	d.Rejoining = node
	// Deleting resets the node, as node-reset does: an operator may not.
	out, err := CP.Kubectl(ctx, append(Operator, "delete", "talosmachine", "-n", d.Ns, "worker-2", "--wait=false")...)
	if msg := fmt.Sprint(err, out); err == nil || !strings.Contains(msg, "Forbidden") || !strings.Contains(msg, `cannot delete resource "talosmachines"`) {
		t.Fatalf("an operator's delete of worker-2: %v\n%s", err, out)
	}
	MustKubectl(ctx, t, append(Admin, "delete", "talosmachine", "-n", d.Ns, "worker-2", "--wait=false")...)
	err = wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		_, err := d.Machines.Get(ctx, "worker-2", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("worker-2 was not released: %v", err)
	}
	if node.Phase() != talossim.PhaseMaintenance {
		t.Errorf("worker-2's node is %s, want maintenance", node.Phase())
	}
	if r := node.LastReset(); r == nil || !r.GetGraceful() || !r.GetReboot() {
		t.Errorf("reset request %v, want graceful with reboot", r)
	}
	WaitEvent(ctx, t, d.Ns, "worker-2", corev1.EventTypeNormal, v1alpha1.EventNodeReset)
	delete(d.Nodes, "worker-2")
	var last v1alpha1.MachineCounts
	err = wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		c, err := APIClient(t).IchorV1alpha1().TalosClusters(d.Ns).Get(ctx, "demo", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = c.Status.Machines
		return last == v1alpha1.MachineCounts{Total: 4, Ready: 4, ControlPlanes: 3, Workers: 1} &&
			meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ClusterConditionReady), nil
	})
	if err != nil {
		t.Errorf("counts after the deletion: %+v (%v)", last, err)
	}
}

// bootstrapTokenWhileJoining: the bootstrap token authenticates only while a machine joins.
func (d *DemoCluster) BootstrapTokenWhileJoining(t *testing.T) {
	ctx := d.Ctx
	rc, token := d.BootstrapAccess(t)
	if d.Rejoining == nil || d.Rejoining.Phase() != talossim.PhaseMaintenance {
		t.Fatal("needs worker-2's node back in maintenance, where the step before should have left it")
	}
	// worker-2's node comes back as worker-3. While it cannot be reached,
	// it is joining: the token authenticates, as a kubelet needs.
	manifest := fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: worker-3, namespace: %s}
spec: {clusterName: demo, role: worker, address: "%s", hostname: worker-3, install: {disk: /dev/sda}}
`, d.Ns, d.Rejoining.Addr())
	if out, err := CP.KubectlWithInput(ctx, []byte(manifest), append(Operator, "apply", "-f", "-")...); err != nil {
		t.Fatalf("kubectl apply worker-3 as an operator: %v\n%s", err, out)
	}
	WaitMachine(ctx, t, d.Ns, "worker-3", "pinned", PinnedTo(d.Rejoining.MaintenanceFingerprint()))
	if err := d.Rejoining.SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	d.DecideAs(t, Admin, "carol", "worker-3", v1alpha1.ApprovalApproved, "")
	c := WaitCluster(ctx, t, d.Ns, "demo", v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionTrue, v1alpha1.ClusterReasonMachinesJoining)
	if msg := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ClusterConditionBootstrapTokenEnabled).Message; !strings.Contains(msg, "worker-3") {
		t.Errorf("BootstrapTokenEnabled says %q, want worker-3 named", msg)
	}
	WaitEvent(ctx, t, d.Ns, "demo", corev1.EventTypeNormal, v1alpha1.EventBootstrapTokenEnabled)
	var last error
	err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		last = SelfReview(ctx, rc, token)
		return last == nil, nil
	})
	if err != nil {
		t.Errorf("the bootstrap token while worker-3 joins: %v", last)
	}

	// It joins, and the token stops authenticating.
	d.Rejoining.ClearFaults()
	WaitMachineFor(ctx, t, d.Ns, "worker-3", ClusterWait, "Ready", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseReady
	})
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionFalse, v1alpha1.ClusterReasonAllMachinesJoined)
	err = wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		last = SelfReview(ctx, rc, token)
		return apierrors.IsUnauthorized(last), nil
	})
	if err != nil {
		t.Errorf("the bootstrap token after worker-3 joined: %v, want Unauthorized", last)
	}
	d.Nodes["worker-3"] = d.Rejoining
}

// rebootAndDeleteAtOnce: a reboot-required patch and a control plane's deletion at once take one node away at a time.
func (d *DemoCluster) RebootAndDeleteAtOnce(t *testing.T) {
	ctx := d.Ctx
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	rest := maps.Clone(d.Nodes)
	delete(rest, "cp-3")
	before, since := d.AppliedHashes(t), time.Now()
	if _, err := d.Machines.Get(ctx, "cp-3", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		out, err := CP.Kubectl(ctx, append(Admin, "delete", "talosmachine", "-n", d.Ns, "cp-3", "--wait=false")...)
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
		done <- err
	}()
	d.ApplyPatch(t, "env-and-delete", "machine:\n  env:\n    ICHOR_BOTH: \"1\"")
	if err := <-done; err != nil {
		t.Fatalf("an admin's delete of cp-3: %v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ClusterWait, true, func(ctx context.Context) (bool, error) {
		_, err := d.Machines.Get(ctx, "cp-3", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("cp-3 was not reset and released: %v", err)
	}
	cp3 := d.Nodes["cp-3"]
	delete(d.Nodes, "cp-3")
	for name := range rest {
		WaitMachineFor(ctx, t, d.Ns, name, ClusterWait, "the patch is rolled out", func(m *v1alpha1.TalosMachine) bool {
			return m.Status.AppliedConfig != nil && m.Status.AppliedConfig.Hash != before[name] && m.Status.Phase == v1alpha1.MachinePhaseReady
		})
	}
	all := maps.Clone(rest)
	all["cp-3"] = cp3
	if most, when := MostAwayAtOnce(all, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
		for name, n := range all {
			for _, c := range n.PhaseChanges() {
				if !c.At.Before(since) {
					t.Logf("%s: %s at %s", name, c.Phase, c.At.Format(time.StampMilli))
				}
			}
		}
	}
	if cp3.Phase() != talossim.PhaseMaintenance {
		t.Errorf("cp-3's node is %s, want maintenance", cp3.Phase())
	}
	if members := d.Etcd.Members(); len(members) != 2 {
		t.Errorf("etcd members %+v, want cp-1 and cp-2", members)
	}
	WaitBudgetFree(ctx, t, d.Ns, "demo")
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
}

// rejectedNeverConfigured: a rejected machine is never configured.
func (d *DemoCluster) RejectedNeverConfigured(t *testing.T) {
	ctx := d.Ctx
	m, err := d.Machines.Get(ctx, "rejected", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Status.Phase != v1alpha1.MachinePhaseRejected || m.Status.AppliedConfig != nil || d.Rejected.Phase() != talossim.PhaseMaintenance {
		t.Errorf("rejected machine: phase %s, applied %+v, node %s", m.Status.Phase, m.Status.AppliedConfig, d.Rejected.Phase())
	}
}

// impostorSentNothing: an impostor at a pinned address is sent nothing.
func (d *DemoCluster) ImpostorSentNothing(t *testing.T) {
	ctx := d.Ctx
	m := WaitMachine(ctx, t, d.Ns, "impostor", "the config is held back", func(m *v1alpha1.TalosMachine) bool {
		return HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonCertificateMismatch)
	})
	if m.Status.AppliedConfig != nil || len(d.Impostor.ImpostorConfigs()) != 0 || d.Impostor.Phase() != talossim.PhaseMaintenance {
		t.Errorf("impostor: applied %+v, %d configs delivered, node %s", m.Status.AppliedConfig, len(d.Impostor.ImpostorConfigs()), d.Impostor.Phase())
	}
	WaitEvent(ctx, t, d.Ns, "impostor", corev1.EventTypeWarning, v1alpha1.EventCertificateMismatch)
}

// StatusWritersKeepToTheirRows: after the journey, in which most status
// writers wrote, each field manager owns only its row of the table of
// status writers (v1alpha1, statuswriters.go), as managedFields say.
func (d *DemoCluster) StatusWritersKeepToTheirRows(t *testing.T) {
	CheckStatusOwners(d.Ctx, t, d.Ns)
}

// WaitClusterFor is waitCluster with its own deadline.
func WaitClusterFor(ctx context.Context, t testing.TB, ns, name string, within time.Duration, condType string, status metav1.ConditionStatus, reason string) *v1alpha1.TalosCluster {
	t.Helper()
	client := APIClient(t).IchorV1alpha1().TalosClusters(ns)
	var last *v1alpha1.TalosCluster
	err := wait.PollUntilContextTimeout(ctx, ControllerPoll, within, true, func(ctx context.Context) (bool, error) {
		c, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = c
		got := meta.FindStatusCondition(c.Status.Conditions, condType)
		return got != nil && got.Status == status && got.Reason == reason, nil
	})
	if err != nil {
		var st any
		if last != nil {
			st = last.Status
		}
		t.Fatalf("TalosCluster %s/%s: waiting for %s=%s (%s): %v\nstatus: %+v", ns, name, condType, status, reason, err, st)
	}
	return last
}

// Indent prefixes every line of text with prefix.
func Indent(text, prefix string) string {
	return prefix + strings.ReplaceAll(text, "\n", "\n"+prefix)
}

// MostAwayAtOnce is the most nodes that were away at one instant from since
// on, and when, read from each node's timestamped phase changes (no
// sampling can miss an overlap). Away is any phase but running; a node in
// maintenance left its cluster (reset) and is not away from it.
func MostAwayAtOnce(nodes map[string]*talossim.Node, since time.Time) (int, string) {
	type change struct {
		node string
		away bool
		at   time.Time
	}
	var changes []change
	away := map[string]bool{}
	for name, n := range nodes {
		for _, c := range n.PhaseChanges() {
			isAway := c.Phase != talossim.PhaseRunning && c.Phase != talossim.PhaseMaintenance
			if c.At.Before(since) {
				away[name] = isAway // the state at since
				continue
			}
			changes = append(changes, change{name, isAway, c.At})
		}
	}
	slices.SortStableFunc(changes, func(a, b change) int { return a.at.Compare(b.at) })
	count := func() (int, []string) {
		var names []string
		for name, a := range away {
			if a {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		return len(names), names
	}
	most, mostNames := count()
	when := ""
	if most > 0 {
		when = fmt.Sprintf("%v at %s", mostNames, since.Format(time.StampMilli))
	}
	for _, c := range changes {
		away[c.node] = c.away
		if n, names := count(); n > most {
			most, when = n, fmt.Sprintf("%v at %s", names, c.at.Format(time.StampMilli))
		}
	}
	return most, when
}

// WaitBudgetFree waits until no machine holds the cluster's disruption budget.
func WaitBudgetFree(ctx context.Context, t *testing.T, ns, cluster string) {
	t.Helper()
	var last *v1alpha1.DisruptionStatus
	err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		c, err := APIClient(t).IchorV1alpha1().TalosClusters(ns).Get(ctx, cluster, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = c.Status.Disruption
		return last == nil, nil
	})
	if err != nil {
		t.Errorf("the disruption budget of %s is still held: %+v", cluster, last)
	}
}

// RebootedOnce checks that every node rebooted exactly once between two counts.
func RebootedOnce(t *testing.T, before, after map[string]int) {
	t.Helper()
	for name := range after {
		if after[name] != before[name]+1 {
			t.Errorf("%s rebooted %d times, want once", name, after[name]-before[name])
		}
	}
}

// BootstrapTokenOf is the bootstrap token (cluster.token, "<id>.<secret>")
// in every machine config of the cluster.
func BootstrapTokenOf(ctx context.Context, t *testing.T, ns, cluster string) string {
	t.Helper()
	c, err := APIClient(t).IchorV1alpha1().TalosClusters(ns).Get(ctx, cluster, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := kubernetes.NewForConfigOrDie(CP.AdminConfig).CoreV1().Secrets(ns).Get(ctx, secretsbundle.SecretName(c), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bundle secrets.Bundle
	if err := yaml.Unmarshal(s.Data[secretsbundle.BundleKey], &bundle); err != nil || bundle.Secrets == nil {
		t.Fatalf("the bundle of %s: %v", cluster, err)
	}
	return bundle.Secrets.BootstrapToken
}

// TokenClient talks to a managed cluster's kube-apiserver with a bearer
// token, trusting its CA as a kubelet at TLS bootstrap does.
func TokenClient(rc *rest.Config, token string) kubernetes.Interface {
	cfg := rest.AnonymousClientConfig(rc)
	cfg.BearerToken = token
	return kubernetes.NewForConfigOrDie(cfg)
}

// SelfReview asks kube-apiserver who the token is: nil when it authenticates.
func SelfReview(ctx context.Context, rc *rest.Config, token string) error {
	_, err := TokenClient(rc, token).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	return err
}

// RequestKubeletClientCertificate is a kubelet's TLS bootstrap request for
// a client certificate as node, with the bootstrap token.
func RequestKubeletClientCertificate(ctx context.Context, rc *rest.Config, token, node string) (*certv1.CertificateSigningRequest, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		return nil, err
	}
	return TokenClient(rc, token).CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
}

// HostOf is the IP a simulated node listens on.
func HostOf(n *talossim.Node) string {
	host, _, _ := net.SplitHostPort(n.Addr())
	return host
}
