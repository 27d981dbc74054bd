package machineconfig

import (
	"context"
	"fmt"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/disruption"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// restartsAPIServer reports whether m holds its cluster's disruption
// budget for a change that restarts its kube-apiserver: until that
// kube-apiserver serves the change, m is not back.
func restartsAPIServer(c *v1alpha1.TalosCluster, m *v1alpha1.TalosMachine) bool {
	return disruption.HeldBy(c, m) && c.Status.Disruption.Action == v1alpha1.DisruptionAPIServerRestart
}

// apiServerWaits says what a control plane still waits for before its
// kube-apiserver serves the config the node runs, or "": its static pod
// (mirror pod kube-apiserver-<node>) carries the version of the node's
// APIServerConfig in talos.dev/config-version, which is how `talosctl
// upgrade-k8s` tells that a control plane took a change, and that of its
// configuration files in talos.dev/config-file-version (a change of the
// structured authentication configuration alone moves only that one), and
// is Ready. The versions are read from the node itself.
func (r *Reconciler) apiServerWaits(ctx context.Context, s step, node talos.Node, bundle *secrets.Bundle) (string, error) {
	versions, err := node.APIServerVersions(ctx)
	if err != nil {
		return fmt.Sprintf("reading the node's APIServerConfig: %v", err), nil
	}
	version := versions.Config
	if version == "" {
		return "", nil // not a control plane after all: nothing restarts
	}
	name := "kube-apiserver-" + s.m.Status.NodeName
	kube, err := r.workload(s.cluster, bundle, s.kubernetesAccepted...)
	if err != nil {
		return "", err
	}
	// Listed by name: ichor-controller may list pods, not get them.
	list := func() (*corev1.PodList, error) {
		return kube.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	}
	pods, err := list()
	if apierrors.IsForbidden(err) {
		// Roles set up by an older Ichor: install the controller's access.
		if err := workload.InstallControllerAccess(ctx, bundle, s.cluster.Spec.ControlPlane.Endpoint, r.Now(), s.kubernetesAccepted...); err != nil {
			return "", fmt.Errorf("install ichor-controller's access to the cluster's Kubernetes: %w", err)
		}
		pods, err = list()
	}
	if err != nil {
		return fmt.Sprintf("the cluster's Kubernetes API does not answer while kube-apiserver restarts: %v", err), nil
	}
	i := slices.IndexFunc(pods.Items, func(p corev1.Pod) bool { return p.Name == name })
	if i < 0 {
		return fmt.Sprintf("waiting for the static pod %s", name), nil
	}
	pod := &pods.Items[i]
	if got := pod.Annotations[constants.AnnotationStaticPodConfigVersion]; got != version {
		return fmt.Sprintf("waiting for kube-apiserver on %s to run config version %s (its static pod runs %s); "+
			"if the new flags keep it from starting, fix them: no other control plane takes the change meanwhile",
			s.m.Status.NodeName, version, got), nil
	}
	if files := versions.ConfigFiles; files != "" && pod.Annotations[constants.AnnotationStaticPodConfigFileVersion] != files {
		return fmt.Sprintf("waiting for kube-apiserver on %s to run its configuration files at version %s (its static pod runs %q)",
			s.m.Status.NodeName, files, pod.Annotations[constants.AnnotationStaticPodConfigFileVersion]), nil
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return "", nil
		}
	}
	return fmt.Sprintf("waiting for the static pod %s at config version %s to be Ready", name, version), nil
}

// workload opens the cluster's Kubernetes API as ichor-controller.
func (r *Reconciler) workload(c *v1alpha1.TalosCluster, bundle *secrets.Bundle, alsoTrusted ...[]byte) (kubernetes.Interface, error) {
	if r.Workload != nil {
		return r.Workload(bundle, c.Spec.ControlPlane.Endpoint)
	}
	return r.kubes.Get(c.UID, c.Spec.ControlPlane.Endpoint, bundle, r.Now(), r.Options.CredentialTTL, alsoTrusted...)
}
