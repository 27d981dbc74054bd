package machineconfig

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos/talostest"
)

// A change that restarts kube-apiserver on control planes goes to one at
// a time, and a control plane is back, giving the budget to the next,
// only once its kube-apiserver static pod runs the node's new
// APIServerConfig version and is Ready — not as soon as the node took the
// config, while kube-apiserver may still fail to start with it.
func TestAPIServerRestartWaitsForTheStaticPod(t *testing.T) {
	cp1, cp2 := machine("cp1", "10.5.0.11:50000", "uuid-1"), machine("cp2", "10.5.0.12:50000", "uuid-2")
	cp1.Spec.Role, cp2.Spec.Role = v1alpha1.MachineRoleControlPlane, v1alpha1.MachineRoleControlPlane
	f := newFixture(t, cp1, cp2)
	nodes := map[string]*talostest.Node{
		"cp1": {UUID: "uuid-1", Stage: "maintenance", Etcd: true, APIServerConfigVersion: "3"},
		"cp2": {UUID: "uuid-2", Stage: "maintenance", Etcd: true, APIServerConfigVersion: "3"},
	}
	f.dialer.Nodes["10.5.0.11:50000"], f.dialer.Nodes["10.5.0.12:50000"] = nodes["cp1"], nodes["cp2"]

	kube := kubefake.NewClientset()
	mirror := func(node, version string, ready bool) {
		t.Helper()
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-" + node, Namespace: metav1.NamespaceSystem,
				Annotations: map[string]string{constants.AnnotationStaticPodConfigVersion: version}},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
		}
		pods := kube.CoreV1().Pods(metav1.NamespaceSystem)
		_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
		if _, err := pods.Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.r.Workload = func(*secrets.Bundle, string) (kubernetes.Interface, error) { return kube, nil }
	mirror("node-uuid-1", "3", true)
	mirror("node-uuid-2", "3", true)

	f.installReady("cp1", "cp2")
	f.createPatch("audit", "cluster:\n  apiServer:\n    extraArgs:\n      audit-log-maxage: \"30\"\n")
	f.now = f.now.Add(time.Minute)
	f.reconcile("cp1")
	if h := f.holder(); h == nil || h.Machine != "cp1" || h.Action != v1alpha1.DisruptionAPIServerRestart {
		t.Fatalf("cp1's restart holds no budget: %+v", h)
	}
	nodes["cp1"].APIServerConfigVersion = "4" // Talos took the change

	// The node runs the config, but its kube-apiserver still runs version 3.
	f.reconcile("cp1")
	m := f.get("cp1")
	if reason(m, v1alpha1.MachineConditionReady) != v1alpha1.MachineReasonAPIServerRestarting || m.Status.Phase != v1alpha1.MachinePhaseConfiguring {
		t.Fatalf("cp1 before its kube-apiserver serves: %s %+v", m.Status.Phase, m.Status.Conditions)
	}
	if h := f.holder(); h == nil || h.Machine != "cp1" {
		t.Fatalf("cp1 gave the budget back before its kube-apiserver served: %+v", h)
	}
	f.reconcile("cp2")
	if got := nodes["cp2"].Calls; len(got) != 1 {
		t.Fatalf("cp2 was sent %v while cp1's kube-apiserver restarted", got)
	}

	// At the new version but not Ready yet: still waiting.
	mirror("node-uuid-1", "4", false)
	f.reconcile("cp1")
	if h := f.holder(); h == nil || h.Machine != "cp1" {
		t.Fatalf("cp1 gave the budget back while its kube-apiserver was not Ready: %+v", h)
	}

	// At the new config version, Ready, but its configuration files (the
	// structured authentication configuration …) moved too: still waiting.
	nodes["cp1"].APIServerConfigFilesVersion = "b2"
	mirror("node-uuid-1", "4", true)
	f.reconcile("cp1")
	if m := f.get("cp1"); reason(m, v1alpha1.MachineConditionReady) != v1alpha1.MachineReasonAPIServerRestarting {
		t.Fatalf("cp1 before its kube-apiserver runs the new configuration files: %s %+v", m.Status.Phase, m.Status.Conditions)
	}

	pod, err := kube.CoreV1().Pods(metav1.NamespaceSystem).Get(context.Background(), "kube-apiserver-node-uuid-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations[constants.AnnotationStaticPodConfigFileVersion] = "b2"
	if _, err := kube.CoreV1().Pods(metav1.NamespaceSystem).Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.reconcile("cp1")
	if m := f.get("cp1"); m.Status.Phase != v1alpha1.MachinePhaseReady {
		t.Fatalf("cp1 once its kube-apiserver serves: %s %+v", m.Status.Phase, m.Status.Conditions)
	}
	if h := f.holder(); h != nil {
		t.Fatalf("cp1 is back and still holds the budget: %+v", h)
	}
	f.reconcile("cp2")
	if h := f.holder(); h == nil || h.Machine != "cp2" || h.Action != v1alpha1.DisruptionAPIServerRestart {
		t.Fatalf("cp2's turn holds no budget: %+v", h)
	}
}
