package workload

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// kube-proxy runs as a DaemonSet that Talos creates from a control plane's
// bootstrap manifests ("10-kube-proxy", rendered from cluster.proxy) and
// then leaves alone: a new cluster.proxy.image changes the manifest, not the
// DaemonSet, until the manifests are synced (`talosctl upgrade-k8s` ends
// with that). A kubernetes-upgrade syncs exactly the one object it changes,
// the DaemonSet, as Talos's sync writes it: server-side apply as Talos's
// field manager, marked with Talos's inventory, so a later `talosctl
// upgrade-k8s` finds it as its own.

// KubeProxy is the name of kube-proxy's DaemonSet in kube-system.
const KubeProxy = "kube-proxy"

// Talos's names for the manifests it applies.
const (
	talosFieldManager   = "talos"
	inventoryAnnotation = "config.k8s.io/owning-inventory"
	talosInventory      = "talos-bootstrap-manifests-inventory"
)

// kubeProxyRules let the controller read and apply kube-proxy's DaemonSet
// in kube-system, and nothing else: it is never created or deleted.
func kubeProxyRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, ResourceNames: []string{KubeProxy}, Verbs: []string{"get", "patch"}},
	}
}

// KubeProxyDaemonSet picks kube-proxy's DaemonSet from the objects of a
// bootstrap manifest; nil if it is not there.
func KubeProxyDaemonSet(objects []*unstructured.Unstructured) (*appsv1.DaemonSet, error) {
	for _, o := range objects {
		if o.GetKind() != "DaemonSet" || o.GetName() != KubeProxy || o.GetNamespace() != metav1.NamespaceSystem {
			continue
		}
		var ds appsv1.DaemonSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
			return nil, fmt.Errorf("the bootstrap manifest's DaemonSet %s: %w", KubeProxy, err)
		}
		return &ds, nil
	}
	return nil, nil
}

// KubeProxyImage is the image of the kube-proxy container of ds; "" when
// it has none.
func KubeProxyImage(ds *appsv1.DaemonSet) string {
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == KubeProxy {
			return c.Image
		}
	}
	return ""
}

// ApplyKubeProxy applies want, the DaemonSet of a control plane's bootstrap
// manifest, over kube-proxy's DaemonSet as Talos's manifest sync does:
// server-side apply as Talos's field manager, taking the fields another
// manager set (Talos forces them too), with Talos's inventory annotation.
func ApplyKubeProxy(ctx context.Context, cs kubernetes.Interface, want *appsv1.DaemonSet) error {
	ds := want.DeepCopy()
	ds.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}
	ds.Status = appsv1.DaemonSetStatus{}
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	ds.Annotations[inventoryAnnotation] = talosInventory
	body, err := json.Marshal(ds)
	if err != nil {
		return err
	}
	_, err = cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Patch(ctx, KubeProxy, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: talosFieldManager, Force: ptr.To(true)})
	if err != nil {
		return fmt.Errorf("apply DaemonSet %s/%s: %w", metav1.NamespaceSystem, KubeProxy, err)
	}
	return nil
}

// RolloutWaits says what the rollout of ds still waits for, or "": every
// node scheduled runs a pod of its current template, available.
func RolloutWaits(ds *appsv1.DaemonSet) string {
	s := ds.Status
	switch {
	case s.ObservedGeneration < ds.Generation:
		return fmt.Sprintf("waiting for the DaemonSet %s/%s's controller to see its new template", ds.Namespace, ds.Name)
	case s.UpdatedNumberScheduled < s.DesiredNumberScheduled || s.NumberAvailable < s.DesiredNumberScheduled:
		return fmt.Sprintf("waiting for the DaemonSet %s/%s to roll out: %d of %d pods updated, %d available",
			ds.Namespace, ds.Name, s.UpdatedNumberScheduled, s.DesiredNumberScheduled, s.NumberAvailable)
	}
	return ""
}
