package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	ichorv1 "ichor.dev/ichor/pkg/generated/clientset/versioned/typed/ichor/v1alpha1"
	"ichor.dev/ichor/test/talossim"
)

// crashBeforeWrite is a controller that dies between a node call and the
// status write recording it: the first status write of the machine at path
// whose body holds marker (a reason, found in JSON and protobuf alike) fails, and so does every request after it, as
// from a process that is gone. crashed is closed then.
type crashBeforeWrite struct {
	path, marker string
	crashed      chan struct{}
	once         sync.Once
	mu           sync.Mutex
	dead         bool
}

func newCrashBeforeWrite(ns, machine, marker string) *crashBeforeWrite {
	return &crashBeforeWrite{
		path:    fmt.Sprintf("/apis/ichor.dev/v1alpha1/namespaces/%s/talosmachines/%s/status", ns, machine),
		marker:  marker,
		crashed: make(chan struct{}),
	}
}

func (c *crashBeforeWrite) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		c.mu.Lock()
		dead := c.dead
		c.mu.Unlock()
		if dead {
			return nil, errors.New("test fault: the controller crashed")
		}
		if req.URL.Path == c.path && (req.Method == http.MethodPut || req.Method == http.MethodPatch) && req.Body != nil {
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(c.marker)) {
				c.mu.Lock()
				c.dead = true
				c.mu.Unlock()
				c.once.Do(func() { close(c.crashed) })
				return nil, errors.New("test fault: the controller crashed")
			}
		}
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// timesEntered is how many times the node entered phase.
func timesEntered(n *talossim.Node, phase talossim.Phase) int {
	c := 0
	for _, p := range n.PhaseHistory() {
		if p == phase {
			c++
		}
	}
	return c
}

func machinesIn(t *testing.T, ns string) ichorv1.TalosMachineInterface {
	return apiClient(t).IchorV1alpha1().TalosMachines(ns)
}

// TestControllerCrashBetweenNodeCallAndStatusWrite: a controller that dies
// after a node took an install or a reset, before the status recording it
// was written, is restarted; the machine converges from the node's own
// state, with no step repeated or skipped.
func TestControllerCrashBetweenNodeCallAndStatusWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	installControllerRBAC(ctx, t)
	useProvisioningNetworks(ctx, t, "127.0.6.0/24")
	ns := cp.Namespace(t)
	bindControllerSecrets(ctx, t, ns)
	tune := func(o *ctrlcmd.Options) {
		o.MachineRecheckInterval = time.Second
		o.MachineHealthInterval = 2 * time.Second
		o.MachineContactTimeout = 5 * time.Second
	}
	// A worker gets its Talos API certificate from trustd on a control
	// plane, so the cluster has one.
	trustd := talossim.NewTrustd()
	cp1 := simNode(t, talossim.Options{ListenAddress: "127.0.6.1:0", Trustd: trustd, InstallDelay: 200 * time.Millisecond, RebootDelay: 200 * time.Millisecond})
	node := simNode(t, talossim.Options{ListenAddress: "127.0.6.2:0", Trustd: trustd, InstallDelay: 200 * time.Millisecond, RebootDelay: 200 * time.Millisecond})
	mustApply(ctx, t, fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: crashy, namespace: %[1]s}
spec:
  talosVersion: v1.13.0
  kubernetesVersion: v1.36.0
  controlPlane: {endpoint: "https://127.0.6.100:6443"}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: cp-1, namespace: %[1]s}
spec: {clusterName: crashy, role: controlplane, address: "%[3]s", hostname: cp-1, install: {disk: /dev/sda}}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: w1, namespace: %[1]s}
spec: {clusterName: crashy, role: worker, address: "%[2]s", hostname: w1, install: {disk: /dev/sda}}
`, ns, node.Addr(), cp1.Addr()))

	// The install: the write recording it is lost.
	crash := newCrashBeforeWrite(ns, "w1", v1alpha1.MachineReasonInstalled)
	controller := runControllerWith(t, tune, crash.wrap)
	body, err := json.Marshal(map[string]any{"status": map[string]any{"approval": v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved}}})
	if err != nil {
		t.Fatal(err)
	}
	waitMachine(ctx, t, ns, "cp-1", "pinned", pinnedTo(cp1.MaintenanceFingerprint()))
	mustKubectl(ctx, t, append(admin, "-n", ns, "patch", "talosmachine", "cp-1", "--subresource=approval", "--type=merge", "-p", string(body))...)
	waitMachine(ctx, t, ns, "cp-1", "Ready", func(m *v1alpha1.TalosMachine) bool { return m.Status.Phase == v1alpha1.MachinePhaseReady })
	waitMachine(ctx, t, ns, "w1", "pinned", pinnedTo(node.MaintenanceFingerprint()))
	mustKubectl(ctx, t, append(admin, "-n", ns, "patch", "talosmachine", "w1", "--subresource=approval", "--type=merge", "-p", string(body))...)
	select {
	case <-crash.crashed:
	case <-ctx.Done():
		t.Fatal("the controller never recorded the install")
	}
	controller.stop()
	if m, err := machinesIn(t, ns).Get(ctx, "w1", metav1.GetOptions{}); err != nil || m.Status.AppliedConfig != nil {
		t.Fatalf("after the crash: %v, applied %+v; want no record of the install", err, m.Status.AppliedConfig)
	}
	// The node took it: it installs and boots into its config.
	if err := node.WaitPhase(ctx, talossim.PhaseRunning); err != nil {
		t.Fatal(err)
	}
	controller = runController(t, tune)
	m := waitMachine(ctx, t, ns, "w1", "Ready", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseReady &&
			hasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate)
	})
	if hasCondition(m.Status.Conditions, v1alpha1.MachineConditionCertificateVerified, metav1.ConditionFalse, v1alpha1.MachineReasonCertificateMismatch) {
		t.Errorf("the installed node was taken for an impostor: %+v", m.Status.Conditions)
	}
	waitEventSaying(ctx, t, ns, "w1", corev1.EventTypeNormal, v1alpha1.EventConfigApplied, "installed already")
	if n := timesEntered(node, talossim.PhaseInstalling); n != 1 {
		t.Errorf("the node installed %d times, want once", n)
	}
	controller.stop()

	// The reset of the deleted machine: the write recording it is lost.
	crash = newCrashBeforeWrite(ns, "w1", v1alpha1.MachineReasonResetting)
	controller = runControllerWith(t, tune, crash.wrap)
	mustKubectl(ctx, t, append(admin, "delete", "talosmachine", "-n", ns, "w1", "--wait=false")...)
	select {
	case <-crash.crashed:
	case <-ctx.Done():
		t.Fatal("the controller never recorded the reset")
	}
	controller.stop()
	runController(t, tune)
	err = wait.PollUntilContextTimeout(ctx, controllerPoll, controllerWait, true, func(ctx context.Context) (bool, error) {
		_, err := machinesIn(t, ns).Get(ctx, "w1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("w1 was not released after its reset: %v", err)
	}
	if node.Phase() != talossim.PhaseMaintenance {
		t.Errorf("the node is %s, want maintenance", node.Phase())
	}
	if n := timesEntered(node, talossim.PhaseResetting); n != 1 {
		t.Errorf("the node was reset %d times, want once", n)
	}
	c, err := apiClient(t).IchorV1alpha1().TalosClusters(ns).Get(ctx, "crashy", metav1.GetOptions{})
	if err != nil || c.Status.Disruption != nil {
		t.Errorf("the budget after the reset: %+v, %v; want free", c.Status.Disruption, err)
	}
}
