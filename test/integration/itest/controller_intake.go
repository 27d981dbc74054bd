package itest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/test/talossim"
)

// SimNode starts a simulated node in maintenance mode, stopped when the test ends.
func SimNode(t testing.TB, opts talossim.Options) *talossim.Node {
	t.Helper()
	n, err := talossim.Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("start simulated node: %v", err)
	}
	t.Cleanup(n.Stop)
	return n
}

// ApplyMachine creates a TalosMachine for address with kubectl, as a user would.
func ApplyMachine(ctx context.Context, t *testing.T, ns, name, address string) {
	t.Helper()
	MustApply(ctx, t, fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: %s, namespace: %s}
spec: {address: "%s"}
`, name, ns, address))
}

func PinnedTo(fingerprint string) func(*v1alpha1.TalosMachine) bool {
	return func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Maintenance != nil && m.Status.Maintenance.CertificateFingerprint == fingerprint &&
			m.Status.Phase == v1alpha1.MachinePhasePendingApproval
	}
}

func TestIntakePins(ctx context.Context, t *testing.T, ns string) {
	nodes := map[string]*talossim.Node{}
	for i, name := range []string{"node-a", "node-b"} {
		nodes[name] = SimNode(t, talossim.Options{
			SystemUUID:   fmt.Sprintf("5f0e8d6a-1c2b-4a3d-8e9f-00000000000%d", i+1),
			SystemSerial: fmt.Sprintf("SER-%d", i+1),
			Disks: []talossim.Disk{
				{Path: "/dev/sda", Size: 20 << 30, Model: "SIM DISK", Serial: fmt.Sprintf("D%d", i+1)},
				{Path: "/dev/nvme0n1", Size: 200 << 30, Model: "SIM NVME", Serial: fmt.Sprintf("N%d", i+1)},
			},
			Addresses: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.5.0.%d/24", 11+i))},
		})
		ApplyMachine(ctx, t, ns, name, nodes[name].Addr())
	}
	for name, n := range nodes {
		m := WaitMachine(ctx, t, ns, name, "pinned and awaiting approval", PinnedTo(n.MaintenanceFingerprint()))
		i := name[len(name)-1] - 'a' + 1
		hw := m.Status.Hardware
		if hw == nil || hw.UUID != fmt.Sprintf("5f0e8d6a-1c2b-4a3d-8e9f-00000000000%d", i) || hw.Serial != fmt.Sprintf("SER-%d", i) {
			t.Errorf("%s: hardware %+v", name, hw)
			continue
		}
		wantDisks := []v1alpha1.Disk{
			{Path: "/dev/nvme0n1", SizeBytes: 200 << 30, Model: "SIM NVME", Serial: fmt.Sprintf("N%d", i)},
			{Path: "/dev/sda", SizeBytes: 20 << 30, Model: "SIM DISK", Serial: fmt.Sprintf("D%d", i)},
		}
		if fmt.Sprint(hw.Disks) != fmt.Sprint(wantDisks) {
			t.Errorf("%s: disks %+v, want %+v", name, hw.Disks, wantDisks)
		}
		if want := fmt.Sprintf("10.5.0.%d/24", 10+i); len(hw.Addresses) != 1 || hw.Addresses[0] != want {
			t.Errorf("%s: addresses %v, want [%s]", name, hw.Addresses, want)
		}
		if m.Status.TalosVersion != talossim.DefaultVersion || m.Status.ObservedGeneration != m.Generation {
			t.Errorf("%s: talosVersion %q, observedGeneration %d of %d", name, m.Status.TalosVersion, m.Status.ObservedGeneration, m.Generation)
		}
		for _, c := range []struct {
			typ    string
			status metav1.ConditionStatus
			reason string
		}{
			{v1alpha1.MachineConditionReachable, metav1.ConditionTrue, v1alpha1.MachineReasonContacted},
			{v1alpha1.MachineConditionCertificateVerified, metav1.ConditionTrue, v1alpha1.MachineReasonPinnedOnFirstContact},
			{v1alpha1.MachineConditionApproved, metav1.ConditionFalse, v1alpha1.MachineReasonAwaitingApproval},
		} {
			if !HasCondition(m.Status.Conditions, c.typ, c.status, c.reason) {
				t.Errorf("%s: want %s=%s (%s) in %+v", name, c.typ, c.status, c.reason, m.Status.Conditions)
			}
		}
		e := WaitEvent(ctx, t, ns, name, corev1.EventTypeNormal, v1alpha1.EventCertificatePinned)
		if !strings.Contains(e.Message, n.MaintenanceFingerprint()) {
			t.Errorf("%s: pin Event %q does not name the fingerprint", name, e.Message)
		}
	}
	// kubectl shows the pin as users see it.
	out := MustKubectl(ctx, t, "get", "talosmachines", "-n", ns, "node-a", "-o", "wide")
	if fp := nodes["node-a"].MaintenanceFingerprint(); !strings.Contains(out, fp[:16]) || !strings.Contains(out, "PendingApproval") {
		t.Errorf("kubectl get -o wide does not show the pin and phase:\n%s", out)
	}
}

func TestIntakeImpostor(ctx context.Context, t *testing.T, ns string) {
	n := SimNode(t, talossim.Options{})
	ApplyMachine(ctx, t, ns, "node-c", n.Addr())
	WaitMachine(ctx, t, ns, "node-c", "pinned", PinnedTo(n.MaintenanceFingerprint()))

	if err := n.SetFaults(talossim.Faults{Impostor: true}); err != nil {
		t.Fatal(err)
	}
	m := WaitMachine(ctx, t, ns, "node-c", "the impostor is noticed", func(m *v1alpha1.TalosMachine) bool {
		return HasCondition(m.Status.Conditions, v1alpha1.MachineConditionCertificateVerified, metav1.ConditionFalse, v1alpha1.MachineReasonCertificateMismatch)
	})
	if m.Status.Maintenance.CertificateFingerprint != n.MaintenanceFingerprint() {
		t.Errorf("the pin moved to %s", m.Status.Maintenance.CertificateFingerprint)
	}
	if m.Status.Phase != v1alpha1.MachinePhaseUnreachable ||
		!HasCondition(m.Status.Conditions, v1alpha1.MachineConditionReachable, metav1.ConditionFalse, v1alpha1.MachineReasonCertificateMismatch) {
		t.Errorf("phase %s, conditions %+v", m.Status.Phase, m.Status.Conditions)
	}
	e := WaitEvent(ctx, t, ns, "node-c", corev1.EventTypeWarning, v1alpha1.EventCertificateMismatch)
	if !strings.Contains(e.Message, n.MaintenanceFingerprint()) || !strings.Contains(e.Message, "nothing was sent") {
		t.Errorf("mismatch Event %q", e.Message)
	}
	if got := n.ImpostorConfigs(); len(got) != 0 {
		t.Errorf("the impostor received %d configs", len(got))
	}

	// The real machine is back: it is verified again, still with its pin.
	n.ClearFaults()
	WaitMachine(ctx, t, ns, "node-c", "the real node is verified again", func(m *v1alpha1.TalosMachine) bool {
		return PinnedTo(n.MaintenanceFingerprint())(m) &&
			HasCondition(m.Status.Conditions, v1alpha1.MachineConditionCertificateVerified, metav1.ConditionTrue, v1alpha1.MachineReasonMatchesPin)
	})
	WaitEvent(ctx, t, ns, "node-c", corev1.EventTypeNormal, v1alpha1.EventReachable)
}

// testIntakeExpectedFingerprint: with spec.expectedFingerprint the first
// contact is no trust on first use. A node presenting another certificate
// (the impostor at an address before anything was pinned) is never pinned;
// once the user gives the right fingerprint, it is pinned as the expected one.
func TestIntakeExpectedFingerprint(ctx context.Context, t *testing.T, ns string) {
	n := SimNode(t, talossim.Options{})
	const wrong = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
	apply := func(fingerprint string) {
		t.Helper()
		MustApply(ctx, t, fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: node-x, namespace: %s}
spec: {address: "%s", expectedFingerprint: "%s"}
`, ns, n.Addr(), fingerprint))
	}
	apply(wrong)
	m := WaitMachine(ctx, t, ns, "node-x", "the unexpected certificate is refused", func(m *v1alpha1.TalosMachine) bool {
		return HasCondition(m.Status.Conditions, v1alpha1.MachineConditionCertificateVerified, metav1.ConditionFalse, v1alpha1.MachineReasonCertificateMismatch)
	})
	if m.Status.Maintenance != nil || m.Status.Hardware != nil {
		t.Fatalf("a node presenting another certificate than the expected one was pinned or read: %+v", m.Status)
	}
	e := WaitEvent(ctx, t, ns, "node-x", corev1.EventTypeWarning, v1alpha1.EventCertificateMismatch)
	if !strings.Contains(e.Message, n.MaintenanceFingerprint()) {
		t.Errorf("mismatch Event %q does not name what was presented", e.Message)
	}

	apply(n.MaintenanceFingerprint())
	WaitMachine(ctx, t, ns, "node-x", "pinned as expected", func(m *v1alpha1.TalosMachine) bool {
		return PinnedTo(n.MaintenanceFingerprint())(m) &&
			HasCondition(m.Status.Conditions, v1alpha1.MachineConditionCertificateVerified, metav1.ConditionTrue, v1alpha1.MachineReasonMatchesExpectedFingerprint)
	})
}

func TestIntakeUnreachable(ctx context.Context, t *testing.T, ns string) {
	n := SimNode(t, talossim.Options{})
	if err := n.SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	ApplyMachine(ctx, t, ns, "node-d", n.Addr())
	m := WaitMachine(ctx, t, ns, "node-d", "unreachable", func(m *v1alpha1.TalosMachine) bool {
		return HasCondition(m.Status.Conditions, v1alpha1.MachineConditionReachable, metav1.ConditionFalse, v1alpha1.MachineReasonConnectionFailed)
	})
	if m.Status.Phase != v1alpha1.MachinePhaseUnreachable || m.Status.Maintenance != nil || m.Status.Hardware != nil {
		t.Errorf("an unreachable machine: phase %s, maintenance %+v, hardware %+v", m.Status.Phase, m.Status.Maintenance, m.Status.Hardware)
	}
	// Why it did not answer stays in the controller's log: status and Events
	// would otherwise answer a port scan for whoever may write addresses.
	reachable := ConditionOf(m, v1alpha1.MachineConditionReachable)
	e := WaitEvent(ctx, t, ns, "node-d", corev1.EventTypeWarning, v1alpha1.EventUnreachable)
	for _, msg := range []string{reachable.Message, e.Message} {
		if msg != intake.UnreachableMessage(n.Addr()) {
			t.Errorf("an unreachable machine is described as %q", msg)
		}
	}

	// It is retried after a backoff, not in a loop: the node answers again
	// right away, but is contacted no sooner than the minimum backoff (5s,
	// less a second for timestamps' precision) after the failed contact.
	n.ClearFaults()
	m = WaitMachine(ctx, t, ns, "node-d", "pinned once it answers", PinnedTo(n.MaintenanceFingerprint()))
	reached := ConditionOf(m, v1alpha1.MachineConditionReachable)
	if unreachableFor := reached.LastTransitionTime.Sub(m.CreationTimestamp.Time); unreachableFor < 4*time.Second {
		t.Errorf("retried after %v, sooner than the minimum backoff", unreachableFor)
	}
	WaitEvent(ctx, t, ns, "node-d", corev1.EventTypeNormal, v1alpha1.EventReachable)

	// A port nobody listens on: the condition says so, and nothing is pinned.
	ApplyMachine(ctx, t, ns, "node-e", FreeLoopbackAddress(t))
	m = WaitMachine(ctx, t, ns, "node-e", "unreachable", func(m *v1alpha1.TalosMachine) bool {
		return HasCondition(m.Status.Conditions, v1alpha1.MachineConditionReachable, metav1.ConditionFalse, v1alpha1.MachineReasonConnectionFailed)
	})
	if c := ConditionOf(m, v1alpha1.MachineConditionReachable); !strings.Contains(c.Message, m.Spec.Address) {
		t.Errorf("Reachable message %q does not name the address", c.Message)
	}
}

func ConditionOf(m *v1alpha1.TalosMachine, condType string) metav1.Condition {
	for _, c := range m.Status.Conditions {
		if c.Type == condType {
			return c
		}
	}
	return metav1.Condition{}
}

// ScanNodes starts count simulated nodes on the Talos API port of the first
// addresses of a random loopback /29, so they are found only by scanning.
func ScanNodes(t *testing.T, count int) (netip.Prefix, []*talossim.Node) {
	t.Helper()
	for range 20 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(100 + rand.IntN(150)), byte(rand.IntN(256)), byte(8 * rand.IntN(32))}), 29)
		var nodes []*talossim.Node
		a := p.Addr()
		for range count {
			a = a.Next()
			n, err := talossim.Start(t.Context(), talossim.Options{ListenAddress: a.String() + ":" + v1alpha1.DefaultTalosAPIPort})
			if err != nil {
				break
			}
			nodes = append(nodes, n)
		}
		if len(nodes) == count {
			for _, n := range nodes {
				t.Cleanup(n.Stop)
			}
			return p, nodes
		}
		for _, n := range nodes {
			n.Stop()
		}
	}
	t.Fatal("no free loopback /29 for the scan")
	return netip.Prefix{}, nil
}

func TestIntakeScan(ctx context.Context, t *testing.T, ns string) {
	network, nodes := ScanNodes(t, 2)
	client := APIClient(t).IchorV1alpha1()
	install := &v1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.InstallationName},
		Spec: v1alpha1.IchorInstallationSpec{Settings: v1alpha1.InstallationSettings{
			ProvisioningNetworks: []string{network.String()},
			ScanInterval:         &metav1.Duration{Duration: 30 * time.Second},
		}},
	}
	if _, err := client.IchorInstallations().Create(ctx, install, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create IchorInstallation: %v", err)
	}
	t.Cleanup(func() {
		_ = client.IchorInstallations().Delete(context.Background(), v1alpha1.InstallationName, metav1.DeleteOptions{})
	})

	for _, n := range nodes {
		list, err := WaitMachines(ctx, t, ns, n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		name := list.Name
		m := WaitMachine(ctx, t, ns, name, "pinned by the scan", PinnedTo(n.MaintenanceFingerprint()))
		if !strings.HasPrefix(name, "machine-") || m.Status.Hardware == nil || !strings.Contains(name, strings.ToLower(m.Status.Hardware.UUID)) {
			t.Errorf("discovered machine %s is not named from its UUID (hardware %+v)", name, m.Status.Hardware)
		}
		if m.Labels["ichor.dev/discovered"] != "true" {
			t.Errorf("discovered machine %s has labels %v", name, m.Labels)
		}
		WaitEvent(ctx, t, ns, name, corev1.EventTypeNormal, v1alpha1.EventDiscovered)
	}
	var inst *v1alpha1.IchorInstallation
	err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		var err error
		inst, err = client.IchorInstallations().Get(ctx, v1alpha1.InstallationName, metav1.GetOptions{})
		return err == nil && HasCondition(inst.Status.Conditions, v1alpha1.InstallationConditionProvisioningNetworksScanned, metav1.ConditionTrue, v1alpha1.InstallationReasonScanned), nil
	})
	if err != nil {
		t.Fatalf("no scan condition on the installation: %v; %+v", err, inst)
	}
	list, err := client.TalosMachines(ns).List(ctx, metav1.ListOptions{LabelSelector: "ichor.dev/discovered=true"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != len(nodes) {
		t.Errorf("the scan created %d machines for %d nodes", len(list.Items), len(nodes))
	}
}

// WaitMachines waits for a TalosMachine in ns with address.
func WaitMachines(ctx context.Context, t *testing.T, ns, address string) (*v1alpha1.TalosMachine, error) {
	client := APIClient(t).IchorV1alpha1().TalosMachines(ns)
	var found *v1alpha1.TalosMachine
	err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			if list.Items[i].Spec.Address == address {
				found = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no TalosMachine for %s in %s: %w", address, ns, err)
	}
	return found, nil
}

// BundleYAML is a fresh bundle as talosctl gen secrets writes it.
func BundleYAML(t *testing.T) []byte {
	t.Helper()
	contract, err := config.ParseContractFromVersion("v1.13.0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ClusterYAML(ns, name, secretsRef string) string {
	ref := ""
	if secretsRef != "" {
		ref = "\n  secretsRef: {name: " + secretsRef + "}"
	}
	return fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: %s, namespace: %s}
spec:
  talosVersion: v1.13.0
  kubernetesVersion: v1.36.0
  controlPlane: {endpoint: "https://10.5.0.2:6443"}%s
`, name, ns, ref)
}

func TestClusterSecrets(ctx context.Context, t *testing.T, ns string) {
	kube := kubernetes.NewForConfigOrDie(CP.AdminConfig)
	secretsClient := kube.CoreV1().Secrets(ns)
	provided := BundleYAML(t)
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "handmade"}, Data: map[string][]byte{secretsbundle.BundleKey: provided}},
		{ObjectMeta: metav1.ObjectMeta{Name: "garbled"}, Data: map[string][]byte{secretsbundle.BundleKey: []byte("certs: [not-a-bundle-9f2c")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "taken-secrets"}, StringData: map[string]string{"other": "data"}},
	} {
		if _, err := secretsClient.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	MustApply(ctx, t, strings.Join([]string{
		ClusterYAML(ns, "generated", ""),
		ClusterYAML(ns, "provided", "handmade"),
		ClusterYAML(ns, "missing", "nowhere"),
		ClusterYAML(ns, "invalid", "garbled"),
		ClusterYAML(ns, "taken", ""),
	}, "---"))

	// Generated: the Secret belongs to the cluster and holds a valid bundle.
	c := WaitCluster(ctx, t, ns, "generated", v1alpha1.ClusterConditionSecretsReady, metav1.ConditionTrue, v1alpha1.ClusterReasonGenerated)
	if c.Status.Phase != v1alpha1.ClusterPhasePending || c.Status.ObservedGeneration != c.Generation {
		t.Errorf("phase %s, observedGeneration %d of %d", c.Status.Phase, c.Status.ObservedGeneration, c.Generation)
	}
	gen, err := secretsClient.Get(ctx, "generated-secrets", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if owner := metav1.GetControllerOf(gen); owner == nil || owner.UID != c.UID || owner.Kind != "TalosCluster" || owner.BlockOwnerDeletion == nil || !*owner.BlockOwnerDeletion {
		t.Errorf("generated Secret's controller is %+v, want TalosCluster %s", owner, c.UID)
	}
	if gen.Type != secretsbundle.SecretType {
		t.Errorf("generated Secret has type %q", gen.Type)
	}
	var bundle secrets.Bundle
	if err := yaml.Unmarshal(gen.Data[secretsbundle.BundleKey], &bundle); err != nil {
		t.Fatalf("generated Secret does not hold a bundle: %v", err)
	}
	bundle.Clock = secrets.NewClock()
	if err := bundle.Validate(config.TalosVersionCurrent); err != nil {
		t.Fatalf("generated bundle is invalid: %v", err)
	}
	WaitEvent(ctx, t, ns, "generated", corev1.EventTypeNormal, v1alpha1.EventSecretsGenerated)

	WaitCluster(ctx, t, ns, "provided", v1alpha1.ClusterConditionSecretsReady, metav1.ConditionTrue, v1alpha1.ClusterReasonProvided)
	WaitCluster(ctx, t, ns, "missing", v1alpha1.ClusterConditionSecretsReady, metav1.ConditionFalse, v1alpha1.ClusterReasonSecretNotFound)
	WaitEvent(ctx, t, ns, "missing", corev1.EventTypeWarning, v1alpha1.ClusterReasonSecretNotFound)
	invalid := WaitCluster(ctx, t, ns, "invalid", v1alpha1.ClusterConditionSecretsReady, metav1.ConditionFalse, v1alpha1.ClusterReasonInvalidBundle)
	if msg := invalid.Status.Conditions[0].Message; strings.Contains(msg, "not-a-bundle-9f2c") {
		t.Errorf("the condition quotes the Secret's data: %q", msg)
	}
	WaitCluster(ctx, t, ns, "taken", v1alpha1.ClusterConditionSecretsReady, metav1.ConditionFalse, v1alpha1.ClusterReasonSecretConflict)
	taken, err := secretsClient.Get(ctx, "taken-secrets", metav1.GetOptions{})
	if err != nil || string(taken.Data["other"]) != "data" || len(taken.OwnerReferences) != 0 || len(taken.Data) != 1 {
		t.Errorf("a Secret the controller did not make was changed: %v %+v", err, taken)
	}
	if _, err := secretsClient.Get(ctx, "nowhere", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a referenced Secret was created: %v", err)
	}

	// The bundles never leave their Secrets: not in a status, an Event or a log line.
	for _, b := range []*secrets.Bundle{&bundle, MustParseBundle(t, provided)} {
		secretsOf := []string{string(b.Certs.OS.Key), b.Secrets.BootstrapToken, b.TrustdInfo.Token, b.Cluster.Secret, string(b.Certs.K8s.Key)}
		out := MustKubectl(ctx, t, "get", "talosclusters", "-n", ns, "-o", "yaml")
		events := EventsText(ctx, t, ns)
		logs := ControllerLog.String()
		for _, s := range secretsOf {
			for where, text := range map[string]string{"TalosClusters": out, "Events": events, "the controller's log": logs} {
				if s != "" && strings.Contains(text, s) {
					t.Errorf("bundle material appears in %s", where)
				}
			}
		}
	}
}

func MustParseBundle(t *testing.T, data []byte) *secrets.Bundle {
	t.Helper()
	var b secrets.Bundle
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&b); err != nil {
		t.Fatal(err)
	}
	return &b
}
