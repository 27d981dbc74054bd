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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
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
	client versioned.Interface
}

var (
	_ admission.ValidationInterface = &Plugin{}
	_ initializer.WantsIchorClient  = &Plugin{}
)

// New returns the plugin; it needs the Ichor client before it is ready.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Delete)}
}

// SetIchorClient implements initializer.WantsIchorClient.
func (p *Plugin) SetIchorClient(c versioned.Interface) { p.client = c }

// ValidateInitialization implements admission.InitializationValidator.
func (p *Plugin) ValidateInitialization() error {
	if p.client == nil {
		return errors.New(PluginName + " has no Ichor client")
	}
	return nil
}

// Validate refuses the deletion of a configured control plane whose cluster
// would be left without a healthy etcd quorum.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
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
	ichorv1 := p.client.IchorV1alpha1()
	cluster, err := ichorv1.TalosClusters(m.Namespace).Get(ctx, m.Spec.ClusterName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && cluster.DeletionTimestamp != nil) {
		return nil // the cluster is going: its etcd has no quorum to keep
	}
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("read TalosCluster %s to check etcd quorum: %w", m.Spec.ClusterName, err))
	}
	list, err := ichorv1.TalosMachines(m.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("list TalosMachines to check etcd quorum: %w", err))
	}
	var others, healthy, unhealthy []string
	for i := range list.Items {
		o := &list.Items[i]
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
		return refuse(ctx, a, m, fmt.Errorf(
			"%s is the last control plane of TalosCluster %s: resetting it destroys the cluster's etcd; delete the TalosCluster to take the cluster down",
			m.Name, m.Spec.ClusterName))
	}
	quorum := len(others)/2 + 1
	if len(healthy) < quorum {
		slices.Sort(unhealthy)
		return refuse(ctx, a, m, fmt.Errorf(
			"deleting control plane %s would leave TalosCluster %s with %d healthy of %d etcd members, and quorum needs %d; wait until these are Ready: %s",
			m.Name, m.Spec.ClusterName, len(healthy), len(others), quorum, strings.Join(unhealthy, ", ")))
	}
	return nil
}

// refuse refuses the delete with why, unless an admin granted an override of
// the check on the machine (talosmachines/override): then the delete goes
// through, with a warning to the client and an audit annotation naming who
// allowed it.
func refuse(ctx context.Context, a admission.Attributes, m *ichor.TalosMachine, why error) error {
	g := m.Status.Override
	if g == nil || g.Check != ichor.CheckControlPlaneQuorum {
		return admission.NewForbidden(a, fmt.Errorf("%w; an admin may let this delete through with the override subresource (check %s)",
			why, ichor.CheckControlPlaneQuorum))
	}
	msg := fmt.Sprintf("deleting %s past the %s check, as %s allowed (%s): %v", m.Name, g.Check, g.By, g.Reason, why)
	warning.AddWarning(ctx, "", msg)
	if err := a.AddAnnotation(ichor.AuditAnnotationOverride, fmt.Sprintf("%s by %s: %s", g.Check, g.By, g.Reason)); err != nil {
		return apierrors.NewInternalError(err)
	}
	return nil
}
