package bootstraptoken

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

func TestJoiningMachines(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	machine := func(name, node string, created time.Time) v1alpha1.TalosMachine {
		return v1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
			Status:     v1alpha1.TalosMachineStatus{NodeName: node},
		}
	}
	node := func(name string, created time.Time, ready corev1.ConditionStatus) corev1.Node {
		return corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}},
		}
	}
	machines := []v1alpha1.TalosMachine{
		machine("approved", "", t0),                            // not configured yet
		machine("configured", "configured", t0),                // no Node yet
		machine("joined", "joined", t0),                        // its Node, Ready
		machine("rebooting", "rebooting", t0),                  // its Node, not Ready: holds its certificate
		machine("readded", "readded", t0.Add(time.Hour)),       // an older machine's Node, not Ready
		machine("readded-up", "readded-up", t0.Add(time.Hour)), // an older Node, Ready again
	}
	nodes := []corev1.Node{
		node("joined", t0.Add(time.Minute), corev1.ConditionTrue),
		node("rebooting", t0.Add(time.Minute), corev1.ConditionUnknown),
		node("readded", t0, corev1.ConditionUnknown),
		node("readded-up", t0, corev1.ConditionTrue),
		node("stranger", t0, corev1.ConditionTrue),
	}
	// A machine a node-reset wiped and pinned again at t0+2h: its Node, Ready
	// from before, last reported at t0+1h; another reported since.
	pinned := func(name string) v1alpha1.TalosMachine {
		m := machine(name, name, t0)
		m.Status.Maintenance = &v1alpha1.MaintenanceStatus{SeenAt: metav1.NewTime(t0.Add(2 * time.Hour))}
		return m
	}
	reported := func(name string, at time.Time) corev1.Node {
		n := node(name, t0.Add(time.Minute), corev1.ConditionTrue)
		n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(at)
		return n
	}
	machines = append(machines, pinned("wiped"), pinned("wiped-rejoined"))
	nodes = append(nodes, reported("wiped", t0.Add(time.Hour)), reported("wiped-rejoined", t0.Add(3*time.Hour)))
	got := joiningMachines(machines, nodes)
	if want := []string{"approved", "configured", "readded", "wiped"}; !slices.Equal(got, want) {
		t.Errorf("joining %v, want %v", got, want)
	}
	if got := joiningMachines(nil, nodes); len(got) != 0 {
		t.Errorf("no machines: joining %v", got)
	}
}
