package kubeletserving

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
)

// TestWritersKeepToTheirRows: the approver applies its rows of the table
// of status writers, on clusters and on machines, all of them and nothing
// else.
func TestWritersKeepToTheirRows(t *testing.T) {
	c, applied := statusapplytest.Client(t)
	r := &Reconciler{Client: c, Options: Options{}.withDefaults()}
	cluster := statusapplytest.Cluster()
	before := cluster.Status.DeepCopy()
	before.Conditions = nil
	if err := r.writeClusterStatus(t.Context(), cluster, before); err != nil {
		t.Fatal(err)
	}
	m := statusapplytest.Machine()
	issued := metav1.NewTime(time.Now())
	newest := map[string]*v1alpha1.KubeletServingCertificateStatus{m.Status.NodeName: {Request: "csr-2", IssuedAt: &issued, NotAfter: &issued}}
	if err := r.recordIssued(t.Context(), []v1alpha1.TalosMachine{*m}, newest); err != nil {
		t.Fatal(err)
	}
	applied.CheckOwned(t, true)
	if n := len(applied.Applies()); n != 2 {
		t.Errorf("%d applies, want one on the cluster and one on the machine", n)
	}
}
