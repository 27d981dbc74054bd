package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// CordonAnnotation names, on a Node Ichor cordoned, what cordoned it: only
// that uncordons it, so a Node an admin cordoned stays cordoned.
const CordonAnnotation = "ichor.dev/cordoned-for"

// Cordon marks a Node unschedulable for owner, as kubectl cordon does, and
// records owner in CordonAnnotation. A Node cordoned already (by someone
// else) is left as it is; one that does not exist too.
func Cordon(ctx context.Context, cs kubernetes.Interface, node, owner string) error {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read Node %s: %w", node, err)
	}
	if n.Spec.Unschedulable {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{CordonAnnotation: owner}, "resourceVersion": n.ResourceVersion},
		"spec":     map[string]any{"unschedulable": true},
	})
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("cordon Node %s: %w", node, err)
	}
	return nil
}

// Uncordon makes a Node that owner cordoned schedulable again, as kubectl
// uncordon does, and drops CordonAnnotation. A Node cordoned by anyone
// else, or not at all, is left as it is.
func Uncordon(ctx context.Context, cs kubernetes.Interface, node, owner string) error {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read Node %s: %w", node, err)
	}
	if n.Annotations[CordonAnnotation] != owner {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{CordonAnnotation: nil}, "resourceVersion": n.ResourceVersion},
		"spec":     map[string]any{"unschedulable": false},
	})
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("uncordon Node %s: %w", node, err)
	}
	return nil
}

// Drain asks every pod of a Node that a drain moves to leave, through the
// Eviction API so that PodDisruptionBudgets hold, as kubectl drain
// --ignore-daemonsets --delete-emptydir-data does: mirror (static) pods and
// DaemonSet pods stay, as do finished ones. It returns the pods still on
// the Node (evicted and terminating, or held by a disruption budget); the
// caller asks again until none is left. The list is a consistent one, so it
// holds every pod bound before the Node was cordoned.
func Drain(ctx context.Context, cs kubernetes.Interface, node string) ([]string, error) {
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list the pods of Node %s: %w", node, err)
	}
	var left []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != node || !drained(p) {
			continue
		}
		name := p.Namespace + "/" + p.Name
		left = append(left, name)
		if p.DeletionTimestamp != nil {
			continue // leaving already
		}
		err := cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		})
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			// A PodDisruptionBudget does not allow it now: asked again next time.
		default:
			return nil, fmt.Errorf("evict pod %s from Node %s: %w", name, node, err)
		}
	}
	return left, nil
}

// drained reports whether a drain moves the pod away.
func drained(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}

// NodeReady reports whether a Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ReportedSince reports whether a Node's kubelet reported its Ready
// condition (whatever its status) at since or later.
func ReportedSince(n *corev1.Node, since time.Time) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return !c.LastHeartbeatTime.Time.Before(since)
		}
	}
	return false
}

// NodeReadySince reports whether a Node is Ready with a heartbeat after
// since: its kubelet reported it after a reboot that began at since, not
// a Ready left over from before.
func NodeReadySince(ctx context.Context, cs kubernetes.Interface, node string, since time.Time) (bool, string, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, "its Node is not registered", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read Node %s: %w", node, err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		switch {
		case c.Status != corev1.ConditionTrue:
			return false, fmt.Sprintf("its Node is not Ready: %s", c.Message), nil
		case c.LastHeartbeatTime.Time.Before(since):
			return false, "its kubelet has not reported since the reboot", nil
		}
		return true, "", nil
	}
	return false, "its Node reports no Ready condition", nil
}
