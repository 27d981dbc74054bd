package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/integration/itest"
	"ichor.dev/ichor/test/talossim"
)

// TestSecureBootRequired: in a cluster that requires SecureBoot, the
// controller reads over each node's maintenance API how it booted, records
// it, and installs the cluster's config only on the node that says it
// booted with SecureBoot; the other, approved all the same, is sent
// nothing and stays in maintenance mode, and its condition and a Warning
// Event say why.
func TestSecureBootRequired(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	itest.InstallControllerRBAC(ctx, t)
	itest.UseProvisioningNetworks(ctx, t, "127.0.13.0/24")
	ns := itest.CP.Namespace(t)
	itest.BindControllerSecrets(ctx, t, ns)
	plain := itest.SimNode(t, talossim.Options{ListenAddress: "127.0.13.1:0", InstallDelay: 200 * time.Millisecond})
	secure := itest.SimNode(t, talossim.Options{ListenAddress: "127.0.13.2:0", InstallDelay: 200 * time.Millisecond, SecureBoot: true})
	itest.MustApply(ctx, t, fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: vault, namespace: %[1]s}
spec:
  talosVersion: v1.13.0
  kubernetesVersion: v1.36.0
  controlPlane: {endpoint: "https://127.0.13.100:6443"}
  security: {secureBoot: {required: true}}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: plain, namespace: %[1]s}
spec: {clusterName: vault, role: controlplane, address: "%[2]s", install: {disk: /dev/sda}}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: secure, namespace: %[1]s}
spec: {clusterName: vault, role: controlplane, address: "%[3]s", install: {disk: /dev/sda}}
`, ns, plain.Addr(), secure.Addr()))
	itest.RunController(t, func(o *ctrlcmd.Options) {
		o.MachineRecheckInterval = time.Second
		o.MachineContactTimeout = 5 * time.Second
	})
	body, err := json.Marshal(map[string]any{"status": map[string]any{"approval": v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, n := range map[string]*talossim.Node{"plain": plain, "secure": secure} {
		itest.WaitMachine(ctx, t, ns, name, "pinned", itest.PinnedTo(n.MaintenanceFingerprint()))
		itest.MustKubectl(ctx, t, append(itest.Admin, "-n", ns, "patch", "talosmachine", name, "--subresource=approval", "--type=merge", "-p", string(body))...)
	}

	itest.WaitMachine(ctx, t, ns, "secure", "installed", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.AppliedConfig != nil && m.Status.Security != nil && m.Status.Security.SecureBoot && m.Status.Security.BootedWithUKI
	})
	m := itest.WaitMachine(ctx, t, ns, "plain", "refused for want of SecureBoot", func(m *v1alpha1.TalosMachine) bool {
		return itest.HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonSecureBootRequired)
	})
	if m.Status.AppliedConfig != nil || m.Status.Security == nil || m.Status.Security.SecureBoot {
		t.Errorf("plain: applied %+v, security %+v", m.Status.AppliedConfig, m.Status.Security)
	}
	itest.WaitEventSaying(ctx, t, ns, "plain", "Warning", "SecureBootRequired", "did not boot with SecureBoot")
	if got := plain.Phase(); got != talossim.PhaseMaintenance {
		t.Errorf("plain's node is %s, want still in maintenance mode: it was sent a config", got)
	}
}
