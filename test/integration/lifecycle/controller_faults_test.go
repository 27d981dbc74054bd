package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/integration/itest"
	"ichor.dev/ichor/test/talossim"
)

// TestControllerCrashBetweenNodeCallAndStatusWrite: a controller that dies
// after a node took an install or a reset, before the status recording it
// was written, is restarted; the machine converges from the node's own
// state, with no step repeated or skipped.
func TestControllerCrashBetweenNodeCallAndStatusWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	itest.InstallControllerRBAC(ctx, t)
	itest.UseProvisioningNetworks(ctx, t, "127.0.6.0/24")
	ns := itest.CP.Namespace(t)
	itest.BindControllerSecrets(ctx, t, ns)
	tune := func(o *ctrlcmd.Options) {
		o.MachineRecheckInterval = time.Second
		o.MachineHealthInterval = 2 * time.Second
		o.MachineContactTimeout = 5 * time.Second
	}
	// A worker gets its Talos API certificate from trustd on a control
	// plane, so the cluster has one.
	trustd := talossim.NewTrustd()
	cp1 := itest.SimNode(t, talossim.Options{ListenAddress: "127.0.6.1:0", Trustd: trustd, InstallDelay: 200 * time.Millisecond, RebootDelay: 200 * time.Millisecond})
	node := itest.SimNode(t, talossim.Options{ListenAddress: "127.0.6.2:0", Trustd: trustd, InstallDelay: 200 * time.Millisecond, RebootDelay: 200 * time.Millisecond})
	itest.MustApply(ctx, t, fmt.Sprintf(`
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
	crash := itest.NewCrashBeforeWrite(ns, "w1", v1alpha1.MachineReasonInstalled)
	controller := itest.RunControllerWith(t, tune, crash.Wrap)
	body, err := json.Marshal(map[string]any{"status": map[string]any{"approval": v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved}}})
	if err != nil {
		t.Fatal(err)
	}
	itest.WaitMachine(ctx, t, ns, "cp-1", "pinned", itest.PinnedTo(cp1.MaintenanceFingerprint()))
	itest.MustKubectl(ctx, t, append(itest.Admin, "-n", ns, "patch", "talosmachine", "cp-1", "--subresource=approval", "--type=merge", "-p", string(body))...)
	itest.WaitMachine(ctx, t, ns, "cp-1", "Ready", func(m *v1alpha1.TalosMachine) bool { return m.Status.Phase == v1alpha1.MachinePhaseReady })
	itest.WaitMachine(ctx, t, ns, "w1", "pinned", itest.PinnedTo(node.MaintenanceFingerprint()))
	itest.MustKubectl(ctx, t, append(itest.Admin, "-n", ns, "patch", "talosmachine", "w1", "--subresource=approval", "--type=merge", "-p", string(body))...)
	select {
	case <-crash.Crashed:
	case <-ctx.Done():
		t.Fatal("the controller never recorded the install")
	}
	controller.Stop()
	if m, err := itest.MachinesIn(t, ns).Get(ctx, "w1", metav1.GetOptions{}); err != nil || m.Status.AppliedConfig != nil {
		t.Fatalf("after the crash: %v, applied %+v; want no record of the install", err, m.Status.AppliedConfig)
	}
	// The node took it: it installs and boots into its config.
	if err := node.WaitPhase(ctx, talossim.PhaseRunning); err != nil {
		t.Fatal(err)
	}
	controller = itest.RunController(t, tune)
	m := itest.WaitMachine(ctx, t, ns, "w1", "Ready", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseReady &&
			itest.HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate)
	})
	if itest.HasCondition(m.Status.Conditions, v1alpha1.MachineConditionCertificateVerified, metav1.ConditionFalse, v1alpha1.MachineReasonCertificateMismatch) {
		t.Errorf("the installed node was taken for an impostor: %+v", m.Status.Conditions)
	}
	itest.WaitEventSaying(ctx, t, ns, "w1", corev1.EventTypeNormal, v1alpha1.EventConfigApplied, "installed already")
	if n := itest.TimesEntered(node, talossim.PhaseInstalling); n != 1 {
		t.Errorf("the node installed %d times, want once", n)
	}
	controller.Stop()

	// The reset of the deleted machine: the write recording it is lost.
	crash = itest.NewCrashBeforeWrite(ns, "w1", v1alpha1.MachineReasonResetting)
	controller = itest.RunControllerWith(t, tune, crash.Wrap)
	itest.MustKubectl(ctx, t, append(itest.Admin, "delete", "talosmachine", "-n", ns, "w1", "--wait=false")...)
	select {
	case <-crash.Crashed:
	case <-ctx.Done():
		t.Fatal("the controller never recorded the reset")
	}
	controller.Stop()
	itest.RunController(t, tune)
	err = wait.PollUntilContextTimeout(ctx, itest.ControllerPoll, itest.ControllerWait, true, func(ctx context.Context) (bool, error) {
		_, err := itest.MachinesIn(t, ns).Get(ctx, "w1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("w1 was not released after its reset: %v", err)
	}
	if node.Phase() != talossim.PhaseMaintenance {
		t.Errorf("the node is %s, want maintenance", node.Phase())
	}
	if n := itest.TimesEntered(node, talossim.PhaseResetting); n != 1 {
		t.Errorf("the node was reset %d times, want once", n)
	}
	c, err := itest.APIClient(t).IchorV1alpha1().TalosClusters(ns).Get(ctx, "crashy", metav1.GetOptions{})
	if err != nil || c.Status.Disruption != nil {
		t.Errorf("the budget after the reset: %+v, %v; want free", c.Status.Disruption, err)
	}
}
