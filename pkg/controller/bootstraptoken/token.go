package bootstraptoken

import (
	"context"
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/workload"
)

// restrictBootstrapToken lets the cluster's bootstrap token authenticate
// only while one of its machines is joining (see joining). Outside those
// windows a worker config's token gets nobody a kubelet certificate.
func (r *Reconciler) restrictBootstrapToken(ctx context.Context, v *view, cs kubernetes.Interface, bundle *secretsbundle.Secrets, nodes []corev1.Node) {
	joining := joiningMachines(v.machines, nodes)
	rebootstrap := kubeletsRebootstrap(v.cluster)
	enable := len(joining) > 0 || rebootstrap
	var changed bool
	err := r.withAccess(ctx, v, bundle, func() (err error) {
		changed, err = workload.SetBootstrapToken(ctx, cs, bundle.Bundle, enable)
		return err
	})
	switch {
	case errors.Is(err, workload.ErrTokenSecretMissing):
		v.set(v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionUnknown, v1alpha1.ClusterReasonTokenSecretMissing,
			"%v: a control plane creates it when it boots; until then no kubelet can join", err)
		return
	case err != nil:
		v.set(v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionUnknown, v1alpha1.ClusterReasonTokenUpdateFailed, "set the bootstrap token's usage: %v", err)
		return
	case len(joining) > 0:
		v.set(v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionTrue, v1alpha1.ClusterReasonMachinesJoining,
			"the bootstrap token authenticates while %s join", strings.Join(joining, ", "))
	case rebootstrap:
		v.set(v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionTrue, v1alpha1.ClusterReasonKubeletsRebootstrapping,
			"the bootstrap token authenticates while the kubelets bootstrap client certificates from the new Kubernetes CA (TalosOperation %s)",
			v.cluster.Status.CARotation.Operation)
	default:
		v.set(v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionFalse, v1alpha1.ClusterReasonAllMachinesJoined,
			"every machine has a Node; the bootstrap token authenticates nobody")
	}
	if !changed {
		return
	}
	if enable && len(joining) == 0 {
		events.Record(r.Recorder, v.cluster, nil, v1alpha1.EventBootstrapTokenEnabled, "SetBootstrapToken",
			"The bootstrap token authenticates while the kubelets bootstrap client certificates from the new Kubernetes CA")
		return
	}
	if enable {
		events.Record(r.Recorder, v.cluster, nil, v1alpha1.EventBootstrapTokenEnabled, "SetBootstrapToken",
			"The bootstrap token authenticates while %s join", strings.Join(joining, ", "))
		return
	}
	events.Record(r.Recorder, v.cluster, nil, v1alpha1.EventBootstrapTokenDisabled, "SetBootstrapToken",
		"Every machine has a Node and no kubelet bootstraps: the bootstrap token no longer authenticates")
}

// kubeletsRebootstrap reports whether cluster is in a Kubernetes CA
// rotation's last two phases: a kubelet whose client certificate no CA in
// force verifies (from the phase that drops the old CA on) bootstraps a new
// one with the bootstrap token, as Talos has it do; the token is enabled
// from the phase before, so that none waits for it.
func kubeletsRebootstrap(cluster *v1alpha1.TalosCluster) bool {
	r := cluster.Status.CARotation
	return r != nil && r.Kubernetes && r.Phase != v1alpha1.CARotationAcceptNew
}

// joiningMachines are the machines whose kubelet may need the bootstrap
// token: from approval until their Node registers. A Node older than the
// machine is a previous machine's under the same name (its kubelet's
// certificate went with a reset): while it is not Ready, the new kubelet
// may still be bootstrapping. So is the kubelet of a machine whose node a
// node-reset wiped and Ichor pinned again after its Node last reported:
// its certificate went with the wipe, and its Node may still read Ready.
func joiningMachines(machines []v1alpha1.TalosMachine, nodes []corev1.Node) []string {
	byName := map[string]*corev1.Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	var joining []string
	for _, m := range machines {
		n := byName[m.Status.NodeName]
		switch {
		case m.Status.NodeName == "" || n == nil:
			joining = append(joining, m.Name)
		case n.CreationTimestamp.Before(&m.CreationTimestamp) && !workload.NodeReady(n):
			joining = append(joining, m.Name)
		case m.Status.Maintenance != nil && !workload.ReportedSince(n, m.Status.Maintenance.SeenAt.Time):
			joining = append(joining, m.Name)
		}
	}
	return joining
}
