package clustersecrets

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
)

// TestWriteStatusKeepsToItsRow: the secrets reconciler applies its row of
// the table of status writers, all of it and nothing else.
func TestWriteStatusKeepsToItsRow(t *testing.T) {
	c, applied := statusapplytest.Client(t)
	r := &Reconciler{Client: c, Now: time.Now}
	cond := metav1.Condition{Type: v1alpha1.ClusterConditionSecretsReady, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ClusterReasonSecretNotFound, Message: "gone"}
	if err := r.writeStatus(t.Context(), statusapplytest.Cluster(), cond); err != nil {
		t.Fatal(err)
	}
	applied.CheckOwned(t, true)
}
