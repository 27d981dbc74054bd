package integration

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
	"slices"
	"strings"
	"testing"
	"time"

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

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
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

// clusterWait bounds a whole cluster's way to Ready: installs, reboots, a
// real kube-apiserver and kubelet TLS bootstrap, under -race on 2 cores.
const clusterWait = 5 * time.Minute

// operator is the user the cluster tests act as: in the ichor:operator group, nothing more.
var operator = []string{"--as=olivia", "--as-group=ichor:operator"}

// viewer is a user who may only read.
var viewer = []string{"--as=victor", "--as-group=ichor:viewer"}

// admin is the user for what only admins may do, like deleting a machine (which resets its node).
var admin = []string{"--as=carol", "--as-group=ichor:admin"}

// TestControllerBuildsACluster drives three control planes and two workers
// from kubectl apply to a Ready cluster as an ichor:operator, through the
// controller and the real machinery client to simulated nodes that start a
// real Kubernetes control plane when bootstrapped. Beside it, a rejected
// machine is never configured and an impostor at an approved machine's
// pinned address is sent nothing. The steps run in this order and build on
// each other; each is a method of demoCluster.
func TestControllerBuildsACluster(t *testing.T) {
	d := newDemoCluster(t)
	t.Run("three control planes and two workers become Ready", d.becomesReady)
	t.Run("a no-reboot patch applies everywhere without a reboot", d.noRebootPatch)
	t.Run("a reboot-required patch reboots one node at a time", d.rebootPatch)
	t.Run("a bad patch reports its error and changes nothing", d.badPatch)
	t.Run("a patch that encrypts the system disk waits for a node-reset", d.encryptionPatch)
	t.Run("a controller restarted mid-rollout resumes without repeating or skipping a step", d.restartMidRollout)
	t.Run("the cluster trusts the OpenID provider, one control plane at a time, and people reach it as themselves", d.oidcTrust)
	t.Run("kubelet serving certificates are approved after checking each node's Talos API", d.kubeletServing)
	t.Run("Talos credential requests are signed for the least role, or denied, and deleted", d.credentialRequests)
	t.Run("an etcd snapshot streams through kube-apiserver and ichor-apiserver", d.etcdSnapshot)
	t.Run("a support bundle streams as a zip archive", d.supportBundle)
	t.Run("a packet capture streams as a pcap file for its duration", d.packetCapture)
	t.Run("a packet capture the node cuts fails for the client instead of ending short", d.packetCaptureCut)
	t.Run("a reader talosconfig works with talosctl and reads only", d.readerTalosconfig)
	t.Run("ichor download saves whole files only, and ichor status shows the cluster", d.cliDownloads)
	t.Run("deleting a control plane that would cost etcd its quorum is refused", d.quorumKeepsControlPlanes)
	t.Run("the bootstrap token authenticates nobody once every machine joined", d.bootstrapTokenClosed)
	t.Run("deleting a machine resets its node first", d.deleteResetsNode)
	t.Run("the bootstrap token authenticates only while a machine joins", d.bootstrapTokenWhileJoining)
	t.Run("a reboot-required patch and a control plane's deletion at once take one node away at a time", d.rebootAndDeleteAtOnce)
	t.Run("a rejected machine is never configured", d.rejectedNeverConfigured)
	t.Run("an impostor at a pinned address is sent nothing", d.impostorSentNothing)
}

// demoCluster is the cluster TestControllerBuildsACluster builds, and what
// its steps share: three control planes and two workers on simulated Talos
// nodes with a real Kubernetes control plane, approved with kubectl as the
// README shows; a rejected machine and an impostor of another cluster; the
// controller that manages them (a step restarts it); and the helpers the
// patch steps use.
type demoCluster struct {
	parent     *testing.T
	ctx        context.Context
	ns         string
	tune       func(*ctrlcmd.Options)
	controller *runningController
	kube       *talossim.Kubernetes
	endpoint   string
	etcd       *talossim.EtcdCluster
	trustd     *talossim.Trustd
	roles      map[string]v1alpha1.MachineRole
	nodes      map[string]*talossim.Node
	names      []string // demo's machines, workers first
	rejected   *talossim.Node
	impostor   *talossim.Node
	machines   ichorv1.TalosMachineInterface
	patches    ichorv1.TalosConfigPatchInterface
	// registry is what the nodes can pull; nil: every installer of a Talos version.
	registry *talossim.Registry
	// rejoining is the node a deleted machine left, which a later step adds again.
	rejoining *talossim.Node
	// backupVolumeDir is the controller's --backup-volume-dir.
	backupVolumeDir string
}

// newDemoCluster builds demo: every machine pinned and decided.
func newDemoCluster(t *testing.T) *demoCluster { return newDemoClusterWith(t, demoSetup{}) }

// demoSetup is what a test changes of demo's set-up.
type demoSetup struct {
	// tune changes the controller's options after demo's own.
	tune func(*ctrlcmd.Options)
	// registry is what the nodes can pull; nil: every installer of a Talos version.
	registry *talossim.Registry
	// kubernetesVersion demo is created at; default v1.36.0.
	kubernetesVersion string
	// realEtcdSnapshots makes etcd snapshots those of the real etcd behind
	// demo's kube-apiserver, which a restore brings back, instead of
	// generated ones of snapshotSize.
	realEtcdSnapshots bool
	// diskEncryption encrypts demo's disks with this key; a tpm key
	// gives the nodes SecureBoot, which enrolling one asks for.
	diskEncryption v1alpha1.DiskEncryptionKey
}

// newDemoClusterWith builds demo with setup's changes.
func newDemoClusterWith(t *testing.T, setup demoSetup) *demoCluster {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	t.Cleanup(cancel)
	installControllerRBAC(ctx, t)
	// The operator places machines on the loopback addresses below; an admin
	// made them a provisioning network.
	useProvisioningNetworks(ctx, t, "127.0.3.0/24")
	ns := cp.Namespace(t)
	bindControllerSecrets(ctx, t, ns)
	backupVolumeDir := t.TempDir()
	tune := func(o *ctrlcmd.Options) {
		o.BackupVolumeDir = backupVolumeDir
		o.MachineRecheckInterval = time.Second
		o.MachineHealthInterval = 2 * time.Second
		o.MachineContactTimeout = 5 * time.Second
		// Kubelet serving requests must be seen through the watch, not a timer.
		o.KubeletServingPollInterval = time.Hour
		o.CredentialRequestRetention = credentialRetention
		if setup.tune != nil {
			setup.tune(o)
		}
	}
	parent := t
	controller := runController(t, tune)
	waitHTTP(ctx, t, "http://"+controller.probes+"/readyz")

	binDir, err := harness.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kube := &talossim.Kubernetes{BinDir: binDir, Dir: t.TempDir(), Logf: t.Logf}
	t.Cleanup(kube.Stop)
	keepLogsOnFailure(t, kube.Dir)
	const endpointIP = "127.0.3.100"
	ports, err := proc.FreePorts(endpointIP, 1)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := fmt.Sprintf("https://%s:%d", endpointIP, ports[0])

	etcd, trustd := &talossim.EtcdCluster{Name: "demo", SnapshotSize: snapshotSize}, talossim.NewTrustd()
	if setup.realEtcdSnapshots {
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
  talosVersion: v1.13.0
  kubernetesVersion: %s
  controlPlane: {endpoint: "%s"}
`, ns, cmp.Or(setup.kubernetesVersion, "v1.36.0"), endpoint)
	if setup.diskEncryption != "" {
		manifest += fmt.Sprintf("  security: {diskEncryption: {key: %s}}\n", setup.diskEncryption)
	}
	i := 0
	for _, name := range []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"} {
		i++
		opts := talossim.Options{
			ListenAddress: fmt.Sprintf("127.0.3.%d:0", i), Kubernetes: kube, Etcd: etcd, Trustd: trustd,
			InstallDelay: 200 * time.Millisecond, RebootDelay: 200 * time.Millisecond, Registry: setup.registry,
			SecureBoot: setup.diskEncryption == v1alpha1.DiskEncryptionKeyTPM,
		}
		if name == "worker-2" { // a user disk, for node-reset's user-disks
			opts.Disks = []talossim.Disk{{Path: "/dev/sda", Size: 10 << 30}, {Path: "/dev/sdb", Size: 20 << 30}}
		}
		nodes[name] = simNode(t, opts)
		manifest += fmt.Sprintf(`---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: %s, namespace: %s}
spec: {clusterName: demo, role: %s, address: "%s", hostname: %s, install: {disk: /dev/sda}}
`, name, ns, roles[name], nodes[name].Addr(), name)
	}
	// The rejected machine and the impostor belong to another cluster, so
	// that they do not hold demo back.
	rejected := simNode(t, talossim.Options{ListenAddress: "127.0.3.20:0"})
	impostor := simNode(t, talossim.Options{ListenAddress: "127.0.3.21:0"})
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
	if out, err := cp.KubectlWithInput(ctx, []byte(manifest), append(operator, "apply", "-f", "-")...); err != nil {
		t.Fatalf("kubectl apply as an operator: %v\n%s", err, out)
	}

	machines := apiClientFor(t, cp.ConfigFor("olivia", "ichor:operator")).IchorV1alpha1().TalosMachines(ns)
	patches := apiClientFor(t, cp.ConfigFor("olivia", "ichor:operator")).IchorV1alpha1().TalosConfigPatches(ns)
	// Workers first: once the cluster is bootstrapped, approving any machine is an admin's.
	names := slices.Sorted(maps.Keys(nodes))
	slices.SortStableFunc(names, func(a, b string) int { return strings.Compare(string(roles[b]), string(roles[a])) })
	d := &demoCluster{
		parent: parent, ctx: ctx, ns: ns, tune: tune, controller: controller, kube: kube, endpoint: endpoint,
		etcd: etcd, trustd: trustd, roles: roles, nodes: nodes, names: names, rejected: rejected, impostor: impostor,
		machines: machines, patches: patches, registry: setup.registry, backupVolumeDir: backupVolumeDir,
	}

	// What the controller pinned is approved with kubectl and the approval
	// subresource, as the README shows: workers by the operator, control
	// planes (whose configs hold every CA key) by an admin.
	for _, name := range names {
		n := nodes[name]
		waitMachine(ctx, t, ns, name, "pinned", pinnedTo(n.MaintenanceFingerprint()))
		if roles[name] != v1alpha1.MachineRoleControlPlane {
			d.decideAs(t, operator, "olivia", name, v1alpha1.ApprovalApproved, "")
			continue
		}
		out, err := cp.Kubectl(ctx, append(operator, d.approval(t, name, v1alpha1.ApprovalApproved, "")...)...)
		if msg := fmt.Sprint(err, out); err == nil || !strings.Contains(msg, "talosmachines/privileged-approval") && !strings.Contains(msg, `subresource "privileged-approval"`) {
			t.Fatalf("an operator's approval of control plane %s: %v\n%s", name, err, out)
		}
		d.decideAs(t, admin, "carol", name, v1alpha1.ApprovalApproved, "")
	}
	waitMachine(ctx, t, ns, "rejected", "pinned", pinnedTo(rejected.MaintenanceFingerprint()))
	d.decideAs(t, operator, "olivia", "rejected", v1alpha1.ApprovalRejected, "not ours")
	// An impostor takes the pinned machine's address before it is approved:
	// the controller must send it nothing.
	waitMachine(ctx, t, ns, "impostor", "pinned", pinnedTo(impostor.MaintenanceFingerprint()))
	if err := impostor.SetFaults(talossim.Faults{Impostor: true}); err != nil {
		t.Fatal(err)
	}
	d.decideAs(t, admin, "carol", "impostor", v1alpha1.ApprovalApproved, "")
	return d
}

// approval is the kubectl arguments that decide a machine through its approval subresource.
func (d *demoCluster) approval(t *testing.T, name string, decision v1alpha1.ApprovalDecision, reason string) []string {
	t.Helper()
	body, err := json.Marshal(map[string]any{"status": map[string]any{"approval": v1alpha1.ApprovalStatus{Decision: decision, Reason: reason}}})
	if err != nil {
		t.Fatal(err)
	}
	return []string{"-n", d.ns, "patch", "talosmachine", name, "--subresource=approval", "--type=merge", "-p", string(body)}
}

// decideAs decides a machine as who, and checks the decision is recorded as by's.
func (d *demoCluster) decideAs(t *testing.T, who []string, by, name string, decision v1alpha1.ApprovalDecision, reason string) {
	t.Helper()
	mustKubectl(d.ctx, t, append(who, d.approval(t, name, decision, reason)...)...)
	m := waitMachine(d.ctx, t, d.ns, name, "decided", func(m *v1alpha1.TalosMachine) bool { return m.Status.Approval != nil })
	if a := m.Status.Approval; a.Decision != decision || a.By != by || a.Reason != reason {
		t.Fatalf("%s: approval %+v", name, a)
	}
}

// applyPatch applies a TalosConfigPatch of demo as the operator.
func (d *demoCluster) applyPatch(t *testing.T, name, patch string) {
	t.Helper()
	mustApply(d.ctx, t, fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosConfigPatch
metadata: {name: %s, namespace: %s}
spec:
  clusterName: demo
  patch: |
%s
`, name, d.ns, indent(patch, "    ")))
}

// rolledOut waits until every machine applied a config other than
// before's and is Ready again, and returns the new hashes.
func (d *demoCluster) rolledOut(t *testing.T, before map[string]string) map[string]string {
	t.Helper()
	after := map[string]string{}
	for name := range d.nodes {
		m := waitMachineFor(d.ctx, t, d.ns, name, clusterWait, "the patch is rolled out", func(m *v1alpha1.TalosMachine) bool {
			return m.Status.AppliedConfig != nil && m.Status.AppliedConfig.Hash != before[name] &&
				hasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate) &&
				m.Status.Phase == v1alpha1.MachinePhaseReady
		})
		after[name] = m.Status.AppliedConfig.Hash
	}
	return after
}

// appliedHashes is the hash of the config each machine runs.
func (d *demoCluster) appliedHashes(t *testing.T) map[string]string {
	t.Helper()
	hashes := map[string]string{}
	for name := range d.nodes {
		m, err := d.machines.Get(d.ctx, name, metav1.GetOptions{})
		if err != nil || m.Status.AppliedConfig == nil {
			t.Fatalf("%s: %+v, %v", name, m, err)
		}
		hashes[name] = m.Status.AppliedConfig.Hash
	}
	return hashes
}

// patchSettles waits until a patch's status says it is applied on all five machines with effect.
func (d *demoCluster) patchSettles(t *testing.T, name string, effect v1alpha1.ConfigEffect) {
	t.Helper()
	var last *v1alpha1.TalosConfigPatch
	err := wait.PollUntilContextTimeout(d.ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
		p, err := d.patches.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return hasCondition(p.Status.Conditions, v1alpha1.PatchConditionApplied, metav1.ConditionTrue, v1alpha1.PatchReasonAllApplied) &&
			p.Status.ObservedGeneration == p.Generation, nil
	})
	if err != nil {
		t.Fatalf("patch %s never applied everywhere: %v; status %+v", name, err, last.Status)
	}
	if last.Status.Effect != effect || len(last.Status.AppliedMachines) != len(d.nodes) ||
		!hasCondition(last.Status.Conditions, v1alpha1.PatchConditionValid, metav1.ConditionTrue, v1alpha1.PatchReasonRenders) {
		t.Errorf("patch %s status %+v, want effect %s on all machines", name, last.Status, effect)
	}
}

// reboots is how many times each of demo's nodes rebooted.
func (d *demoCluster) reboots() map[string]int {
	counts := map[string]int{}
	for name, n := range d.nodes {
		counts[name] = timesEntered(n, talossim.PhaseRebooting)
	}
	return counts
}

// bootstrapAccess is the workload cluster's admin configuration and demo's
// bootstrap token, for the bootstrap token steps.
// The bootstrap token is in every worker config; whoever holds one must
// not get a kubelet certificate for another node's name once the machines
// joined (docs/trust-model.md).
func (d *demoCluster) bootstrapAccess(t *testing.T) (*rest.Config, string) {
	t.Helper()
	rc, err := d.kube.WaitReady(d.ctx, d.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return rc, bootstrapTokenOf(d.ctx, t, d.ns, "demo")
}

// becomesReady: three control planes and two workers become Ready.
func (d *demoCluster) becomesReady(t *testing.T) {
	ctx := d.ctx
	c := waitClusterFor(ctx, t, d.ns, "demo", clusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	if got, want := c.Status.Machines, (v1alpha1.MachineCounts{Total: 5, Ready: 5, ControlPlanes: 3, Workers: 2}); got != want {
		t.Errorf("machine counts %+v, want %+v", got, want)
	}
	if c.Status.Phase != v1alpha1.ClusterPhaseReady || c.Status.BootstrappedAt == nil || c.Status.TalosVersion != talossim.DefaultVersion ||
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
	members := d.etcd.Members()
	if len(members) != 3 {
		t.Errorf("etcd members %+v, want the three control planes", members)
	}
	waitEvent(ctx, t, d.ns, "demo", corev1.EventTypeNormal, v1alpha1.EventBootstrapped)
	waitEvent(ctx, t, d.ns, "demo", corev1.EventTypeNormal, v1alpha1.EventClusterReady)

	for name, n := range d.nodes {
		m, err := d.machines.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if m.Status.Phase != v1alpha1.MachinePhaseReady || m.Status.NodeName != name || m.Status.AppliedConfig == nil ||
			!hasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate) {
			t.Errorf("%s: %+v", name, describeStatus(m))
		}
		if n.Phase() != talossim.PhaseRunning {
			t.Errorf("%s: node phase %s", name, n.Phase())
		}
		e := waitEvent(ctx, t, d.ns, name, corev1.EventTypeNormal, v1alpha1.EventConfigApplied)
		if !strings.Contains(e.Message, "pinned certificate") {
			t.Errorf("%s: install Event %q", name, e.Message)
		}
	}

	// The workload cluster: every kubelet registered, and the controller's
	// identity there holds its own role and not more.
	rc, err := d.kube.WaitReady(ctx, d.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	wl := kubernetes.NewForConfigOrDie(rc)
	var nodeNames []string
	err = wait.PollUntilContextTimeout(ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
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
	out := mustKubectl(ctx, t, append(operator, "get", "talosclusters", "-n", d.ns, "demo")...)
	if !strings.Contains(out, "Ready") {
		t.Errorf("kubectl get talosclusters:\n%s", out)
	}
}

// noRebootPatch: a no-reboot patch applies everywhere without a reboot.
func (d *demoCluster) noRebootPatch(t *testing.T) {
	ctx := d.ctx
	before, rebootsBefore := d.appliedHashes(t), d.reboots()
	d.applyPatch(t, "sysctls", "machine:\n  sysctls:\n    net.core.somaxconn: \"65535\"")
	after := d.rolledOut(t, before)
	d.patchSettles(t, "sysctls", v1alpha1.ConfigEffectNoReboot)
	if got := d.reboots(); fmt.Sprint(got) != fmt.Sprint(rebootsBefore) {
		t.Errorf("reboots went from %v to %v", rebootsBefore, got)
	}
	for name := range d.nodes {
		m, _ := d.machines.Get(ctx, name, metav1.GetOptions{})
		if m.Status.AppliedConfig.Hash != after[name] || m.Status.AppliedConfig.Effect != v1alpha1.ConfigEffectNoReboot {
			t.Errorf("%s: applied %+v", name, m.Status.AppliedConfig)
		}
	}
}

// rebootPatch: a reboot-required patch reboots one node at a time.
func (d *demoCluster) rebootPatch(t *testing.T) {
	ctx := d.ctx
	before, rebootsBefore, since := d.appliedHashes(t), d.reboots(), time.Now()
	d.applyPatch(t, "env", "machine:\n  env:\n    ICHOR_TEST: \"1\"")
	d.rolledOut(t, before)
	if most, when := mostAwayAtOnce(d.nodes, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
	}
	rebootedOnce(t, rebootsBefore, d.reboots())
	d.patchSettles(t, "env", v1alpha1.ConfigEffectReboot)
	waitClusterFor(ctx, t, d.ns, "demo", clusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
}

// badPatch: a bad patch reports its error and changes nothing.
func (d *demoCluster) badPatch(t *testing.T) {
	ctx := d.ctx
	before := d.appliedHashes(t)
	d.applyPatch(t, "broken", "machine:\n  kubelet:\n    nodeIP:\n      validSubnets: [not-a-cidr]")
	for name := range d.nodes {
		m := waitMachine(ctx, t, d.ns, name, "the render error is reported", func(m *v1alpha1.TalosMachine) bool {
			return hasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonRenderFailed)
		})
		if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied); !strings.Contains(c.Message, "broken") {
			t.Errorf("%s: the error does not name the patch: %s", name, c.Message)
		}
	}
	waitEvent(ctx, t, d.ns, "cp-1", corev1.EventTypeWarning, v1alpha1.EventConfigFailed)
	err := wait.PollUntilContextTimeout(ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
		p, err := d.patches.Get(ctx, "broken", metav1.GetOptions{})
		return err == nil && hasCondition(p.Status.Conditions, v1alpha1.PatchConditionValid, metav1.ConditionFalse, string(render.PatchInvalidResult)) &&
			len(p.Status.AppliedMachines) == 0, nil
	})
	if err != nil {
		t.Errorf("the broken patch's status does not report it: %v", err)
	}
	if got := d.appliedHashes(t); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("applied configs changed: %v -> %v", before, got)
	}
	if err := d.patches.Delete(ctx, "broken", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for name := range d.nodes {
		waitMachine(ctx, t, d.ns, name, "up to date again", func(m *v1alpha1.TalosMachine) bool {
			return hasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate)
		})
	}
	if got := d.appliedHashes(t); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("removing the bad patch changed configs: %v -> %v", before, got)
	}
}

// encryptionPatch: encrypting STATE is something Talos does only when it
// formats the volume; installed nodes are sent nothing, and say why.
func (d *demoCluster) encryptionPatch(t *testing.T) {
	ctx := d.ctx
	// How each node booted, as it says: the simulated nodes enforce module
	// signatures and booted without SecureBoot.
	for name := range d.nodes {
		m := waitMachine(ctx, t, d.ns, name, "its security state is recorded", func(m *v1alpha1.TalosMachine) bool { return m.Status.Security != nil })
		if sec := m.Status.Security; sec.SecureBoot || sec.BootedWithUKI || !sec.ModuleSignatureEnforced {
			t.Errorf("%s: security %+v", name, sec)
		}
	}
	before := d.appliedHashes(t)
	d.applyPatch(t, "encrypt-state", "apiVersion: v1alpha1\nkind: VolumeConfig\nname: STATE\nencryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      nodeID: {}\n")
	for name := range d.nodes {
		m := waitMachine(ctx, t, d.ns, name, "a reset is asked for", func(m *v1alpha1.TalosMachine) bool {
			return hasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonResetRequired)
		})
		if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied); !strings.Contains(c.Message, "VolumeConfig/STATE:encryption") ||
			!strings.Contains(c.Message, "node-reset") {
			t.Errorf("%s: the condition does not say what and what to do: %s", name, c.Message)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
		p, err := d.patches.Get(ctx, "encrypt-state", metav1.GetOptions{})
		return err == nil && hasCondition(p.Status.Conditions, v1alpha1.PatchConditionApplied, metav1.ConditionFalse, v1alpha1.PatchReasonResetRequired), nil
	})
	if err != nil {
		t.Errorf("the patch's status does not say it waits for a reset: %v", err)
	}
	if got := d.appliedHashes(t); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("applied configs changed: %v -> %v", before, got)
	}
	// A VolumeConfig is a privileged patch: an operator may not take it
	// back either.
	if err := d.patches.Delete(ctx, "encrypt-state", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "talosconfigpatches/privileged") {
		t.Errorf("an operator's delete of a VolumeConfig patch: %v, want Forbidden naming talosconfigpatches/privileged", err)
	}
	admins := apiClientFor(t, cp.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosConfigPatches(d.ns)
	if err := admins.Delete(ctx, "encrypt-state", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for name := range d.nodes {
		waitMachine(ctx, t, d.ns, name, "up to date again", func(m *v1alpha1.TalosMachine) bool {
			return hasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate)
		})
	}
}

// restartMidRollout: a controller restarted mid-rollout resumes without repeating or skipping a step.
func (d *demoCluster) restartMidRollout(t *testing.T) {
	ctx := d.ctx
	before, rebootsBefore, since := d.appliedHashes(t), d.reboots(), time.Now()
	d.applyPatch(t, "env-restart", "machine:\n  env:\n    ICHOR_RESTART: \"1\"")
	// Stop the controller in the middle of a step: a machine holds the
	// disruption budget and its node is away.
	var holder *v1alpha1.DisruptionStatus
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, controllerWait, true, func(ctx context.Context) (bool, error) {
		c, err := apiClient(t).IchorV1alpha1().TalosClusters(d.ns).Get(ctx, "demo", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		holder = c.Status.Disruption
		return holder != nil && d.nodes[holder.Machine] != nil && d.nodes[holder.Machine].Phase() != talossim.PhaseRunning, nil
	})
	if err != nil {
		t.Fatalf("no machine was seen away holding the budget: %v", err)
	}
	d.controller.stop()
	t.Logf("stopped the controller while %s holds the budget for %s", holder.Machine, holder.Action)
	c, err := apiClient(t).IchorV1alpha1().TalosClusters(d.ns).Get(ctx, "demo", metav1.GetOptions{})
	if err != nil || c.Status.Disruption == nil || c.Status.Disruption.MachineUID != holder.MachineUID {
		t.Fatalf("the budget with the controller stopped: %+v, %v; want %s's", c.Status.Disruption, err, holder.Machine)
	}
	if out := mustKubectl(ctx, t, append(operator, "get", "taloscluster", "-n", d.ns, "demo")...); !strings.Contains(out, holder.Machine+" ("+string(holder.Action)+")") {
		t.Errorf("kubectl get does not show the budget's holder:\n%s", out)
	}
	d.controller = runController(d.parent, d.tune) // it outlives this subtest
	d.rolledOut(t, before)
	if most, when := mostAwayAtOnce(d.nodes, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
	}
	rebootedOnce(t, rebootsBefore, d.reboots())
	waitBudgetFree(ctx, t, d.ns, "demo")
}

// kubeletServing: kubelet serving certificates are approved after checking each node's Talos API.
func (d *demoCluster) kubeletServing(t *testing.T) {
	ctx := d.ctx
	mustKubectl(ctx, t, append(operator, "-n", d.ns, "patch", "taloscluster", "demo", "--type=merge", "-p",
		`{"spec":{"security":{"kubeletServingCertificates":{"enabled":true,"verifyFromAPIServer":true}}}}`)...)
	for name := range d.nodes {
		waitMachineFor(ctx, t, d.ns, name, clusterWait, "its serving certificate is recorded", func(m *v1alpha1.TalosMachine) bool {
			c := m.Status.KubeletServingCertificate
			return c != nil && c.Request != "" && c.NotAfter != nil && c.NotAfter.After(time.Now())
		})
	}
	waitClusterFor(ctx, t, d.ns, "demo", clusterWait, v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionTrue, v1alpha1.ClusterReasonAllIssued)
	waitClusterFor(ctx, t, d.ns, "demo", clusterWait, v1alpha1.ClusterConditionKubeletServingVerified, metav1.ConditionTrue, v1alpha1.ClusterReasonAllIssued)
	// The latch has the control planes' kube-apiservers verify kubelets: an
	// API server restart, rolled one control plane at a time.
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		waitMachineFor(ctx, t, d.ns, name, clusterWait, "its kube-apiserver verifies kubelets", func(m *v1alpha1.TalosMachine) bool {
			return m.Status.AppliedConfig != nil && m.Status.AppliedConfig.Effect == v1alpha1.ConfigEffectAPIServerRestart &&
				m.Status.Phase == v1alpha1.MachinePhaseReady
		})
	}
	waitClusterFor(ctx, t, d.ns, "demo", clusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)

	rc, err := d.kube.WaitReady(ctx, d.endpoint)
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
	if len(approved) != len(d.nodes) {
		t.Errorf("approved serving requests of %v, want one per node", approved)
	}

	// The kubelet now serves a certificate the cluster CA vouches for, for its own address.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rc.CAData)
	node, err := wl.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := hostOf(d.nodes["cp-1"])
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
		return kubernetes.NewForConfigOrDie(asNodeConfig(rc, name))
	}
	create := func(as kubernetes.Interface, name, node, signer string, ips ...string) {
		t.Helper()
		_, err := as.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certv1.CertificateSigningRequestSpec{
				Request: servingRequestPEM(t, node, ips...), SignerName: signer,
				Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create CSR %s: %v", name, err)
		}
	}
	neighbour := hostOf(d.nodes["cp-2"])
	// cp-3's Talos API does not answer: its (good) request must wait.
	if err := d.nodes["cp-3"].SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	cp3 := hostOf(d.nodes["cp-3"])
	create(asNode("cp-3"), "unreadable", "cp-3", certv1.KubeletServingSignerName, cp3)
	create(asNode("ghost"), "ghost", "ghost", certv1.KubeletServingSignerName, "127.0.3.99")
	create(asNode("cp-1"), "other-signer", "cp-1", "example.com/serving", ip)
	create(asNode("cp-1"), "neighbour-ip", "cp-1", certv1.KubeletServingSignerName, ip, neighbour)
	var denied *certv1.CertificateSigningRequestCondition
	err = wait.PollUntilContextTimeout(ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
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
	waitEvent(ctx, t, d.ns, "cp-1", corev1.EventTypeWarning, v1alpha1.EventKubeletServingDenied)
	for _, name := range []string{"ghost", "other-signer", "unreadable"} {
		csr, err := wl.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(csr.Status.Conditions) != 0 {
			t.Errorf("%s was decided: %+v, %v", name, csr.Status.Conditions, err)
		}
	}
	// Once cp-3 answers again its request is checked and approved.
	d.nodes["cp-3"].ClearFaults()
	err = wait.PollUntilContextTimeout(ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
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
	waitMachine(ctx, t, d.ns, "cp-3", "Ready again", func(m *v1alpha1.TalosMachine) bool {
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
func (d *demoCluster) credentialRequests(t *testing.T) {
	checkCredentialRequests(d.ctx, t, d.ns, d.nodes["worker-1"])
}

// etcdSnapshot: an etcd snapshot streams through kube-apiserver and ichor-apiserver.
func (d *demoCluster) etcdSnapshot(t *testing.T) {
	checkEtcdSnapshotDownload(d.ctx, t, d.ns, d.etcd)
}

// supportBundle: a support bundle streams as a zip archive.
func (d *demoCluster) supportBundle(t *testing.T) {
	checkSupportBundleDownload(d.ctx, t, d.ns)
}

// packetCapture: a packet capture streams as a pcap file for its duration.
func (d *demoCluster) packetCapture(t *testing.T) {
	checkPacketCaptureDownload(d.ctx, t, d.ns)
}

// packetCaptureCut: a packet capture the node cuts fails for the client instead of ending short.
func (d *demoCluster) packetCaptureCut(t *testing.T) {
	checkCutPacketCapture(d.ctx, t, d.ns, d.nodes["worker-1"])
}

// readerTalosconfig: a reader talosconfig works with talosctl and reads only.
func (d *demoCluster) readerTalosconfig(t *testing.T) {
	checkTalosconfigReaderDownload(d.ctx, t, d.ns, d.nodes)
}

// quorumKeepsControlPlanes: deleting a control plane that would cost etcd its quorum is refused.
func (d *demoCluster) quorumKeepsControlPlanes(t *testing.T) {
	ctx := d.ctx
	if err := d.nodes["cp-3"].SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	waitMachine(ctx, t, d.ns, "cp-3", "noticed down", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseUnreachable
	})
	out, err := cp.Kubectl(ctx, append(admin, "delete", "talosmachine", "-n", d.ns, "cp-1", "--wait=false")...)
	if msg := fmt.Sprint(err, out); err == nil || !strings.Contains(msg, "Forbidden") ||
		!strings.Contains(msg, "quorum needs 2") || !strings.Contains(msg, "cp-3 (Unreachable)") {
		t.Errorf("kubectl delete of cp-1 with cp-3 down: %v\n%s", err, out)
	}
	if _, err := d.machines.Get(ctx, "cp-1", metav1.GetOptions{}); err != nil {
		t.Errorf("cp-1 after the refused delete: %v", err)
	}
	d.nodes["cp-3"].ClearFaults()
	waitMachine(ctx, t, d.ns, "cp-3", "Ready again", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseReady
	})
}

// bootstrapTokenClosed: the bootstrap token authenticates nobody once every machine joined.
func (d *demoCluster) bootstrapTokenClosed(t *testing.T) {
	ctx := d.ctx
	rc, token := d.bootstrapAccess(t)
	// A kubelet's first request at TLS bootstrap, for a control plane's name.
	_, err := requestKubeletClientCertificate(ctx, rc, token, "cp-1")
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("a client certificate request for cp-1 with the bootstrap token: %v, want Unauthorized", err)
	}
	waitCluster(ctx, t, d.ns, "demo", v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionFalse, v1alpha1.ClusterReasonAllMachinesJoined)
	waitEvent(ctx, t, d.ns, "demo", corev1.EventTypeNormal, v1alpha1.EventBootstrapTokenDisabled)

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
func (d *demoCluster) deleteResetsNode(t *testing.T) {
	ctx := d.ctx
	node := d.nodes["worker-2"]
	d.rejoining = node
	// Deleting resets the node, as node-reset does: an operator may not.
	out, err := cp.Kubectl(ctx, append(operator, "delete", "talosmachine", "-n", d.ns, "worker-2", "--wait=false")...)
	if msg := fmt.Sprint(err, out); err == nil || !strings.Contains(msg, "Forbidden") || !strings.Contains(msg, `cannot delete resource "talosmachines"`) {
		t.Fatalf("an operator's delete of worker-2: %v\n%s", err, out)
	}
	mustKubectl(ctx, t, append(admin, "delete", "talosmachine", "-n", d.ns, "worker-2", "--wait=false")...)
	err = wait.PollUntilContextTimeout(ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
		_, err := d.machines.Get(ctx, "worker-2", metav1.GetOptions{})
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
	waitEvent(ctx, t, d.ns, "worker-2", corev1.EventTypeNormal, v1alpha1.EventNodeReset)
	delete(d.nodes, "worker-2")
	var last v1alpha1.MachineCounts
	err = wait.PollUntilContextTimeout(ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
		c, err := apiClient(t).IchorV1alpha1().TalosClusters(d.ns).Get(ctx, "demo", metav1.GetOptions{})
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
func (d *demoCluster) bootstrapTokenWhileJoining(t *testing.T) {
	ctx := d.ctx
	rc, token := d.bootstrapAccess(t)
	if d.rejoining == nil || d.rejoining.Phase() != talossim.PhaseMaintenance {
		t.Skip("needs worker-2's node back in maintenance")
	}
	// worker-2's node comes back as worker-3. While it cannot be reached,
	// it is joining: the token authenticates, as a kubelet needs.
	manifest := fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: worker-3, namespace: %s}
spec: {clusterName: demo, role: worker, address: "%s", hostname: worker-3, install: {disk: /dev/sda}}
`, d.ns, d.rejoining.Addr())
	if out, err := cp.KubectlWithInput(ctx, []byte(manifest), append(operator, "apply", "-f", "-")...); err != nil {
		t.Fatalf("kubectl apply worker-3 as an operator: %v\n%s", err, out)
	}
	waitMachine(ctx, t, d.ns, "worker-3", "pinned", pinnedTo(d.rejoining.MaintenanceFingerprint()))
	if err := d.rejoining.SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	d.decideAs(t, admin, "carol", "worker-3", v1alpha1.ApprovalApproved, "")
	c := waitCluster(ctx, t, d.ns, "demo", v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionTrue, v1alpha1.ClusterReasonMachinesJoining)
	if msg := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ClusterConditionBootstrapTokenEnabled).Message; !strings.Contains(msg, "worker-3") {
		t.Errorf("BootstrapTokenEnabled says %q, want worker-3 named", msg)
	}
	waitEvent(ctx, t, d.ns, "demo", corev1.EventTypeNormal, v1alpha1.EventBootstrapTokenEnabled)
	var last error
	err := wait.PollUntilContextTimeout(ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
		last = selfReview(ctx, rc, token)
		return last == nil, nil
	})
	if err != nil {
		t.Errorf("the bootstrap token while worker-3 joins: %v", last)
	}

	// It joins, and the token stops authenticating.
	d.rejoining.ClearFaults()
	waitMachineFor(ctx, t, d.ns, "worker-3", clusterWait, "Ready", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseReady
	})
	waitClusterFor(ctx, t, d.ns, "demo", clusterWait, v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionFalse, v1alpha1.ClusterReasonAllMachinesJoined)
	err = wait.PollUntilContextTimeout(ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
		last = selfReview(ctx, rc, token)
		return apierrors.IsUnauthorized(last), nil
	})
	if err != nil {
		t.Errorf("the bootstrap token after worker-3 joined: %v, want Unauthorized", last)
	}
	d.nodes["worker-3"] = d.rejoining
}

// rebootAndDeleteAtOnce: a reboot-required patch and a control plane's deletion at once take one node away at a time.
func (d *demoCluster) rebootAndDeleteAtOnce(t *testing.T) {
	ctx := d.ctx
	waitClusterFor(ctx, t, d.ns, "demo", clusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	rest := maps.Clone(d.nodes)
	delete(rest, "cp-3")
	before, since := d.appliedHashes(t), time.Now()
	if _, err := d.machines.Get(ctx, "cp-3", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		out, err := cp.Kubectl(ctx, append(admin, "delete", "talosmachine", "-n", d.ns, "cp-3", "--wait=false")...)
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
		done <- err
	}()
	d.applyPatch(t, "env-and-delete", "machine:\n  env:\n    ICHOR_BOTH: \"1\"")
	if err := <-done; err != nil {
		t.Fatalf("an admin's delete of cp-3: %v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, controllerPoll, clusterWait, true, func(ctx context.Context) (bool, error) {
		_, err := d.machines.Get(ctx, "cp-3", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("cp-3 was not reset and released: %v", err)
	}
	cp3 := d.nodes["cp-3"]
	delete(d.nodes, "cp-3")
	for name := range rest {
		waitMachineFor(ctx, t, d.ns, name, clusterWait, "the patch is rolled out", func(m *v1alpha1.TalosMachine) bool {
			return m.Status.AppliedConfig != nil && m.Status.AppliedConfig.Hash != before[name] && m.Status.Phase == v1alpha1.MachinePhaseReady
		})
	}
	all := maps.Clone(rest)
	all["cp-3"] = cp3
	if most, when := mostAwayAtOnce(all, since); most != 1 {
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
	if members := d.etcd.Members(); len(members) != 2 {
		t.Errorf("etcd members %+v, want cp-1 and cp-2", members)
	}
	waitBudgetFree(ctx, t, d.ns, "demo")
	waitClusterFor(ctx, t, d.ns, "demo", clusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
}

// rejectedNeverConfigured: a rejected machine is never configured.
func (d *demoCluster) rejectedNeverConfigured(t *testing.T) {
	ctx := d.ctx
	m, err := d.machines.Get(ctx, "rejected", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Status.Phase != v1alpha1.MachinePhaseRejected || m.Status.AppliedConfig != nil || d.rejected.Phase() != talossim.PhaseMaintenance {
		t.Errorf("rejected machine: phase %s, applied %+v, node %s", m.Status.Phase, m.Status.AppliedConfig, d.rejected.Phase())
	}
}

// impostorSentNothing: an impostor at a pinned address is sent nothing.
func (d *demoCluster) impostorSentNothing(t *testing.T) {
	ctx := d.ctx
	m := waitMachine(ctx, t, d.ns, "impostor", "the config is held back", func(m *v1alpha1.TalosMachine) bool {
		return hasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonCertificateMismatch)
	})
	if m.Status.AppliedConfig != nil || len(d.impostor.ImpostorConfigs()) != 0 || d.impostor.Phase() != talossim.PhaseMaintenance {
		t.Errorf("impostor: applied %+v, %d configs delivered, node %s", m.Status.AppliedConfig, len(d.impostor.ImpostorConfigs()), d.impostor.Phase())
	}
	waitEvent(ctx, t, d.ns, "impostor", corev1.EventTypeWarning, v1alpha1.EventCertificateMismatch)
}

// waitClusterFor is waitCluster with its own deadline.
func waitClusterFor(ctx context.Context, t testing.TB, ns, name string, within time.Duration, condType string, status metav1.ConditionStatus, reason string) *v1alpha1.TalosCluster {
	t.Helper()
	client := apiClient(t).IchorV1alpha1().TalosClusters(ns)
	var last *v1alpha1.TalosCluster
	err := wait.PollUntilContextTimeout(ctx, controllerPoll, within, true, func(ctx context.Context) (bool, error) {
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

// indent prefixes every line of text with prefix.
func indent(text, prefix string) string {
	return prefix + strings.ReplaceAll(text, "\n", "\n"+prefix)
}

// mostAwayAtOnce is the most nodes that were away at one instant from since
// on, and when, read from each node's timestamped phase changes (no
// sampling can miss an overlap). Away is any phase but running; a node in
// maintenance left its cluster (reset) and is not away from it.
func mostAwayAtOnce(nodes map[string]*talossim.Node, since time.Time) (int, string) {
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

// waitBudgetFree waits until no machine holds the cluster's disruption budget.
func waitBudgetFree(ctx context.Context, t *testing.T, ns, cluster string) {
	t.Helper()
	var last *v1alpha1.DisruptionStatus
	err := wait.PollUntilContextTimeout(ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
		c, err := apiClient(t).IchorV1alpha1().TalosClusters(ns).Get(ctx, cluster, metav1.GetOptions{})
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

// rebootedOnce checks that every node rebooted exactly once between two counts.
func rebootedOnce(t *testing.T, before, after map[string]int) {
	t.Helper()
	for name := range after {
		if after[name] != before[name]+1 {
			t.Errorf("%s rebooted %d times, want once", name, after[name]-before[name])
		}
	}
}

// bootstrapTokenOf is the bootstrap token (cluster.token, "<id>.<secret>")
// in every machine config of the cluster.
func bootstrapTokenOf(ctx context.Context, t *testing.T, ns, cluster string) string {
	t.Helper()
	c, err := apiClient(t).IchorV1alpha1().TalosClusters(ns).Get(ctx, cluster, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := kubernetes.NewForConfigOrDie(cp.AdminConfig).CoreV1().Secrets(ns).Get(ctx, secretsbundle.SecretName(c), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bundle secrets.Bundle
	if err := yaml.Unmarshal(s.Data[secretsbundle.BundleKey], &bundle); err != nil || bundle.Secrets == nil {
		t.Fatalf("the bundle of %s: %v", cluster, err)
	}
	return bundle.Secrets.BootstrapToken
}

// tokenClient talks to a managed cluster's kube-apiserver with a bearer
// token, trusting its CA as a kubelet at TLS bootstrap does.
func tokenClient(rc *rest.Config, token string) kubernetes.Interface {
	cfg := rest.AnonymousClientConfig(rc)
	cfg.BearerToken = token
	return kubernetes.NewForConfigOrDie(cfg)
}

// selfReview asks kube-apiserver who the token is: nil when it authenticates.
func selfReview(ctx context.Context, rc *rest.Config, token string) error {
	_, err := tokenClient(rc, token).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	return err
}

// requestKubeletClientCertificate is a kubelet's TLS bootstrap request for
// a client certificate as node, with the bootstrap token.
func requestKubeletClientCertificate(ctx context.Context, rc *rest.Config, token, node string) (*certv1.CertificateSigningRequest, error) {
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
	return tokenClient(rc, token).CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
}

// hostOf is the IP a simulated node listens on.
func hostOf(n *talossim.Node) string {
	host, _, _ := net.SplitHostPort(n.Addr())
	return host
}
