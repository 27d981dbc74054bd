package taloscluster

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/kubeupgrade"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/workload"
)

// checkKubernetes reaches the cluster's Kubernetes API as ichor-controller's
// own identity; when that identity is not authorized yet, it installs its
// role with a short-lived cluster-admin certificate and tries again. It
// records the version the cluster runs and whether every machine's Node
// is Ready.
func (r *Reconciler) checkKubernetes(ctx context.Context, v *view, bundle *secretsbundle.Secrets) {
	endpoint := v.cluster.Spec.ControlPlane.Endpoint
	// One client per cluster, kept between reconciles: a new one each time
	// was a certificate signed and a TLS connection made per reconcile.
	cs, err := r.kubes().Get(v.cluster.UID, endpoint, bundle.Bundle, v.now.Time, r.Options.CredentialTTL, bundle.KubernetesAccepted...)
	if err != nil {
		v.set(v1alpha1.ClusterConditionKubernetesAPIReachable, metav1.ConditionFalse, v1alpha1.ClusterReasonUnreachable, "%v", err)
		return
	}
	var sv version.Info
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err == nil {
		err = json.Unmarshal(raw, &sv)
	}
	if err != nil {
		v.set(v1alpha1.ClusterConditionKubernetesAPIReachable, metav1.ConditionFalse, v1alpha1.ClusterReasonUnreachable, "read the version at %s: %v", endpoint, err)
		return
	}
	v.cluster.Status.KubernetesVersion = sv.GitVersion
	var nodes *corev1.NodeList
	err = r.withAccess(ctx, v, bundle, func() (err error) {
		nodes, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err
	})
	if errors.Is(err, workload.ErrAccessInstall) {
		v.set(v1alpha1.ClusterConditionKubernetesAPIReachable, metav1.ConditionFalse, v1alpha1.ClusterReasonAccessInstallFailed, "%v", err)
		return
	}
	if err != nil {
		v.set(v1alpha1.ClusterConditionKubernetesAPIReachable, metav1.ConditionFalse, v1alpha1.ClusterReasonUnreachable, "list nodes at %s: %v", endpoint, err)
		return
	}
	v.set(v1alpha1.ClusterConditionKubernetesAPIReachable, metav1.ConditionTrue, v1alpha1.ClusterReasonReachable, "%s answers, Kubernetes %s", endpoint, sv.GitVersion)
	// The version the cluster runs is its lowest component's, as talosctl
	// upgrade-k8s reads it; the answering API server's when none tells.
	pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app"})
	if err == nil {
		if lowest := kubeupgrade.LowestRunning(pods.Items, nodes.Items); lowest != "" {
			v.cluster.Status.KubernetesVersion = lowest
		}
	}
	checkNodes(v, nodes.Items)
}

// checkNodes sets NodesReady: whether every machine has a Ready Node.
func checkNodes(v *view, nodes []corev1.Node) {
	readyNodes := map[string]bool{}
	for i := range nodes {
		readyNodes[nodes[i].Name] = workload.NodeReady(&nodes[i])
	}
	var waiting []string
	for _, m := range v.machines {
		if m.Status.NodeName == "" || !readyNodes[m.Status.NodeName] {
			waiting = append(waiting, m.Name)
		}
	}
	if len(waiting) > 0 {
		v.set(v1alpha1.ClusterConditionNodesReady, metav1.ConditionFalse, v1alpha1.ClusterReasonNodesNotReady,
			"%d of %d machines have a Ready Node; waiting for %s", len(v.machines)-len(waiting), len(v.machines), strings.Join(waiting, ", "))
		return
	}
	v.set(v1alpha1.ClusterConditionNodesReady, metav1.ConditionTrue, v1alpha1.ClusterReasonNodesReady, "every machine's Node is Ready")
}

// withAccess calls f with workload.WithAccess, and records an Event when
// it installed the controller's access.
func (r *Reconciler) withAccess(ctx context.Context, v *view, bundle *secretsbundle.Secrets, f func() error) error {
	installed, err := workload.WithAccess(ctx, bundle.Bundle, v.cluster.Spec.ControlPlane.Endpoint, v.now.Time, bundle.KubernetesAccepted, f)
	if installed {
		events.Record(r.Recorder, v.cluster, nil, v1alpha1.EventControllerAccess, "InstallControllerAccess",
			"Bound the roles %s to %s in the cluster's Kubernetes", workload.ControllerRole, workload.Controller.User)
	}
	return err
}
