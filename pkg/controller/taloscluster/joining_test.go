package taloscluster

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
	got := joiningMachines(machines, nodes)
	if want := []string{"approved", "configured", "readded"}; !slices.Equal(got, want) {
		t.Errorf("joining %v, want %v", got, want)
	}
	if got := joiningMachines(nil, nodes); len(got) != 0 {
		t.Errorf("no machines: joining %v", got)
	}
}
