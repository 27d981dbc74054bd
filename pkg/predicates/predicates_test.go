package predicates

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestNotOnlyServingCertificateRecorded: an update that only records a kubelet serving
// certificate wakes nothing; one that changes anything else does.
func TestNotOnlyServingCertificateRecorded(t *testing.T) {
	before := v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Namespace: "ns", UID: "uid-worker-1"},
		Spec: v1alpha1.TalosMachineSpec{Address: "10.5.0.11:50000"}, Status: v1alpha1.TalosMachineStatus{NodeName: "worker-1"}}
	before.ResourceVersion = "1"
	recorded := *before.DeepCopy()
	recorded.ResourceVersion = "2"
	recorded.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "ichor-kubeletserving"}}
	at := metav1.NewTime(time.Now())
	recorded.Status.KubeletServingCertificate = &v1alpha1.KubeletServingCertificateStatus{Request: "csr-1", IssuedAt: &at, NotAfter: &at}
	renamed := *recorded.DeepCopy()
	renamed.Status.NodeName = "worker-one"

	for _, c := range []struct {
		what      string
		old, next v1alpha1.TalosMachine
		want      bool
	}{
		{"only the record", before, recorded, false},
		{"the record and the node name", before, renamed, true},
		{"the node name", recorded, renamed, true},
	} {
		if got := NotOnlyServingCertificateRecorded.Update(event.UpdateEvent{ObjectOld: &c.old, ObjectNew: &c.next}); got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}
	if before.Status.KubeletServingCertificate != nil || recorded.Status.KubeletServingCertificate == nil || recorded.ResourceVersion != "2" {
		t.Error("the predicate changed the objects it compared")
	}
}
