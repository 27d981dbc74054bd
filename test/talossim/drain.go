package talossim

import (
	"context"
	"fmt"
	"log"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Talos cordons a node it shuts down and marks it with this annotation; once the node runs again it
// uncordons a Node that carries it (and only such a Node: a cordon someone else set stays).
const (
	annotationCordoned      = "talos.dev/cordoned"
	annotationCordonedValue = "true"
)

// drainTimeout bounds a shutdown's drain, after which the node powers off anyway.
const drainTimeout = 5 * time.Minute

// mirrorPodAnnotation marks a static pod's mirror, which a drain leaves alone.
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// drainAPIWait bounds the wait for the cluster's API before a drain: a node whose cluster does not
// answer is not drained.
const drainAPIWait = 10 * time.Second

// joinedLocked reports whether the node's kubelet joined its cluster (it holds a client certificate):
// like Talos, a node that never joined is not drained.
func (n *Node) joinedLocked() bool {
	if n.kubelet == nil || n.kubeletCerts == nil {
		return false
	}

	_, err := n.kubeletCerts.client.Current()

	return err == nil
}

// drain is a sequence's drain of the node before what: bounded by drainTimeout and the node's Stop; a
// drain that fails is logged, and the sequence goes on, as Talos's does.
func (n *Node) drain(spec kubeletSpec, what string) {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()

	go func() {
		select {
		case <-n.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()

	if err := n.cordonAndDrain(ctx, spec); err != nil {
		log.Printf("talossim: draining %s before %s: %v", spec.nodeName, what, err)
	}
}

// cordonAndDrain cordons the node's Node with Talos's annotation and evicts its pods (not a
// DaemonSet's, nor mirror pods) through the Eviction API, which honours PodDisruptionBudgets, until
// none is left. The simulator acts with the cluster's admin credentials where Talos uses the node's.
func (n *Node) cordonAndDrain(ctx context.Context, spec kubeletSpec) error {
	waitCtx, cancel := context.WithTimeout(ctx, drainAPIWait)
	cs, err := n.adminClient(waitCtx, spec)

	cancel()

	if err != nil {
		return err
	}

	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}},"spec":{"unschedulable":true}}`, annotationCordoned, annotationCordonedValue)
	if _, err = cs.CoreV1().Nodes().Patch(ctx, spec.nodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("cordoning: %w", err)
	}

	return wait.PollUntilContextCancel(ctx, kubeletRetryInterval, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + spec.nodeName})
		if err != nil {
			return false, nil //nolint:nilerr // retried until the drain times out
		}

		left := 0

		for i := range pods.Items {
			pod := &pods.Items[i]
			if !drainable(pod) {
				continue
			}

			left++

			if pod.DeletionTimestamp != nil {
				continue
			}

			err := cs.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsTooManyRequests(err) {
				return false, fmt.Errorf("evicting %s/%s: %w", pod.Namespace, pod.Name, err)
			}
		}

		return left == 0, nil
	})
}

// drainable reports whether a drain evicts pod: not a DaemonSet's, not a mirror pod, not finished.
func drainable(pod *corev1.Pod) bool {
	if _, mirror := pod.Annotations[mirrorPodAnnotation]; mirror {
		return false
	}

	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "DaemonSet" {
		return false
	}

	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// uncordonIfCordonedByTalos uncordons the Node of a node that runs again if Talos cordoned it (the
// annotation), as Talos's NodeApplyController does.
func (n *Node) uncordonIfCordonedByTalos(ctx context.Context, spec kubeletSpec) error {
	cs, err := n.adminClient(ctx, spec)
	if err != nil {
		return err
	}

	node, err := cs.CoreV1().Nodes().Get(ctx, spec.nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}

	if _, ok := node.Annotations[annotationCordoned]; !ok || !node.Spec.Unschedulable {
		return nil
	}

	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}},"spec":{"unschedulable":false}}`, annotationCordoned)
	_, err = cs.CoreV1().Nodes().Patch(ctx, spec.nodeName, types.MergePatchType, patch, metav1.PatchOptions{})

	return err
}

// adminClient is a client of the node's cluster with its admin credentials.
func (n *Node) adminClient(ctx context.Context, spec kubeletSpec) (kubernetes.Interface, error) {
	admin, err := n.opts.Kubernetes.WaitReady(ctx, spec.endpoint)
	if err != nil {
		return nil, err
	}

	return kubernetes.NewForConfig(admin)
}
