// Package controlplanequorum refuses to delete a configured control plane
// when that would cost its cluster etcd's quorum. Deleting a TalosMachine
// resets its node, and a control plane that is reset leaves etcd: with too
// few healthy members left, etcd stops accepting writes and the cluster's
// Kubernetes API with it. Deleting the last control plane is refused while
// its TalosCluster exists: that is deleting the cluster, and is said so.
package controlplanequorum

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
	listers "ichor.dev/ichor/pkg/generated/listers/ichor/v1alpha1"
)

// PluginName names the plugin in --enable-admission-plugins and friends.
const PluginName = "IchorControlPlaneQuorum"

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin is the quorum check on TalosMachine deletion.
type Plugin struct {
	*admission.Handler
	machines listers.TalosMachineLister
	clusters listers.TalosClusterLister
}

var (
	_ admission.ValidationInterface   = &Plugin{}
	_ initializer.WantsIchorInformers = &Plugin{}
)

// New returns the plugin; it needs the Ichor informers before it is ready.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Delete)}
}

// SetIchorInformers implements initializer.WantsIchorInformers.
func (p *Plugin) SetIchorInformers(f externalversions.SharedInformerFactory) {
	machines, clusters := f.Ichor().V1alpha1().TalosMachines(), f.Ichor().V1alpha1().TalosClusters()
	p.machines, p.clusters = machines.Lister(), clusters.Lister()
	p.SetReadyFunc(func() bool { return machines.Informer().HasSynced() && clusters.Informer().HasSynced() })
}

// ValidateInitialization implements admission.InitializationValidator.
func (p *Plugin) ValidateInitialization() error {
	if p.machines == nil || p.clusters == nil {
		return errors.New(PluginName + " has no Ichor informers")
	}
	return nil
}

// Validate refuses the deletion of a configured control plane whose cluster
// would be left without a healthy etcd quorum.
func (p *Plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != ichor.Resource("talosmachines") || a.GetSubresource() != "" {
		return nil
	}
	m, ok := a.GetOldObject().(*ichor.TalosMachine)
	if !ok {
		return nil // a collection delete admits each object on its own
	}
	if m.Spec.Role != ichor.MachineRoleControlPlane || m.Status.AppliedConfig == nil ||
		m.Status.Approval == nil || m.Status.Approval.Decision != ichor.ApprovalApproved {
		return nil // never configured: no etcd member to lose
	}
	if !p.WaitForReady() {
		return admission.NewForbidden(a, errors.New("not yet ready to check etcd quorum"))
	}
	cluster, err := p.clusters.TalosClusters(m.Namespace).Get(m.Spec.ClusterName)
	if apierrors.IsNotFound(err) || (err == nil && cluster.DeletionTimestamp != nil) {
		return nil // the cluster is going: its etcd has no quorum to keep
	}
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	all, err := p.machines.TalosMachines(m.Namespace).List(labels.Everything())
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	var others, healthy, unhealthy []string
	for _, o := range all {
		if o.Name == m.Name || o.Spec.ClusterName != m.Spec.ClusterName || o.DeletionTimestamp != nil ||
			o.Spec.Role != v1alpha1.MachineRoleControlPlane || o.Status.AppliedConfig == nil ||
			o.Status.Approval == nil || o.Status.Approval.Decision != v1alpha1.ApprovalApproved {
			continue
		}
		others = append(others, o.Name)
		if o.Status.Phase == v1alpha1.MachinePhaseReady {
			healthy = append(healthy, o.Name)
		} else {
			unhealthy = append(unhealthy, fmt.Sprintf("%s (%s)", o.Name, o.Status.Phase))
		}
	}
	if len(others) == 0 {
		return admission.NewForbidden(a, fmt.Errorf(
			"%s is the last control plane of TalosCluster %s: resetting it destroys the cluster's etcd; delete the TalosCluster to take the cluster down",
			m.Name, m.Spec.ClusterName))
	}
	quorum := len(others)/2 + 1
	if len(healthy) < quorum {
		slices.Sort(unhealthy)
		return admission.NewForbidden(a, fmt.Errorf(
			"deleting control plane %s would leave TalosCluster %s with %d healthy of %d etcd members, and quorum needs %d; wait until these are Ready: %s",
			m.Name, m.Spec.ClusterName, len(healthy), len(others), quorum, strings.Join(unhealthy, ", ")))
	}
	return nil
}
