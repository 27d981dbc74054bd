package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/integration/itest"
)

// TestControllerIntake runs ichor-controller in this process as its own
// ServiceAccount against simulated Talos nodes reached through the real
// machinery client: machines created with kubectl are pinned with their
// facts, an impostor at a pinned address gets nothing, an unreachable
// machine says so and is taken in once it answers, a provisioning-network
// scan creates machines for the nodes it finds, and clusters get their
// secrets bundles without the bundle ever leaving its Secret.
func TestControllerIntake(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	itest.InstallControllerRBAC(ctx, t)
	ns := itest.CP.Namespace(t)
	itest.BindControllerSecrets(ctx, t, ns)
	probes := itest.StartController(t, func(o *ctrlcmd.Options) {
		o.DiscoveryNamespace = ns
		o.MachineRecheckInterval = time.Second
		o.MachineContactTimeout = 5 * time.Second
	})
	itest.WaitHTTP(ctx, t, "http://"+probes+"/healthz")
	itest.WaitHTTP(ctx, t, "http://"+probes+"/readyz")

	t.Run("pins the certificate and reads the facts", func(t *testing.T) { itest.TestIntakePins(ctx, t, ns) })
	t.Run("an impostor at a pinned address gets nothing", func(t *testing.T) { itest.TestIntakeImpostor(ctx, t, ns) })
	t.Run("an expected fingerprint is pinned, and nothing else", func(t *testing.T) { itest.TestIntakeExpectedFingerprint(ctx, t, ns) })
	t.Run("an unreachable machine is retried", func(t *testing.T) { itest.TestIntakeUnreachable(ctx, t, ns) })
	t.Run("provisioning networks are scanned", func(t *testing.T) { itest.TestIntakeScan(ctx, t, ns) })
	t.Run("secrets bundles", func(t *testing.T) { itest.TestClusterSecrets(ctx, t, ns) })
	t.Run("no secrets where the controller is not bound", func(t *testing.T) {
		unbound := itest.CP.Namespace(t)
		itest.MustApply(ctx, t, itest.ClusterYAML(unbound, "elsewhere", ""))
		c := itest.WaitClusterFor(ctx, t, unbound, "elsewhere", itest.ControllerWait, v1alpha1.ClusterConditionSecretsReady, metav1.ConditionFalse, v1alpha1.ClusterReasonSecretsForbidden)
		if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ClusterConditionSecretsReady); !strings.Contains(cond.Message, "kubectl create rolebinding ichor-controller-secrets -n "+unbound) {
			t.Errorf("SecretsReady says %q", cond.Message)
		}
	})
}
