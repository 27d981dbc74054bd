// Package managementaudiences keeps the management plane's token audiences
// out of every managed cluster's trust. A person's OIDC ID token for an
// audience the management cluster's kube-apiserver accepts signs them in to
// the management plane; a managed cluster that trusted the same audience
// would receive such tokens from its users, and whoever controls that
// cluster's kube-apiserver (its root, its own admins) could replay an Ichor
// admin's token against the management plane. So a TalosCluster's
// spec.authentication.clientID may not be one of those audiences (the
// IchorInstallation's spec.settings.managementAudiences, and Ichor's own
// issuer's default), and an installation may not declare an audience some
// cluster already trusts.
package managementaudiences

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
	listers "ichor.dev/ichor/pkg/generated/listers/ichor/v1alpha1"
)

// PluginName names the plugin in --enable-admission-plugins and friends.
const PluginName = "IchorManagementAudiences"

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin refuses a managed cluster's trust in a management audience.
type Plugin struct {
	*admission.Handler
	client        versioned.Interface
	installations listers.IchorInstallationLister
	clusters      listers.TalosClusterLister
}

var (
	_ admission.ValidationInterface   = &Plugin{}
	_ initializer.WantsIchorClient    = &Plugin{}
	_ initializer.WantsIchorInformers = &Plugin{}
)

// New returns the plugin; it needs a client and informers before use.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetIchorClient receives the client that reads the installation fresh.
func (p *Plugin) SetIchorClient(c versioned.Interface) { p.client = c }

// SetIchorInformers receives the informers of installations and clusters.
func (p *Plugin) SetIchorInformers(f externalversions.SharedInformerFactory) {
	p.installations = f.Ichor().V1alpha1().IchorInstallations().Lister()
	p.clusters = f.Ichor().V1alpha1().TalosClusters().Lister()
}

// ValidateInitialization refuses to run without a client and informers.
func (p *Plugin) ValidateInitialization() error {
	if p.client == nil || p.installations == nil || p.clusters == nil {
		return errors.New(PluginName + " needs an Ichor client and informers")
	}
	return nil
}

// Validate checks a cluster's trust, or an installation's audiences.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	switch sub := a.GetSubresource(); a.GetResource().GroupResource() {
	case ichor.Resource("talosclusters"):
		if sub != "" && sub != "authentication" {
			return nil
		}
		c, ok := a.GetObject().(*ichor.TalosCluster)
		if !ok || c.Spec.Authentication == nil {
			return nil
		}
		if old, ok := a.GetOldObject().(*ichor.TalosCluster); ok && old.Spec.Authentication != nil && old.Spec.Authentication.ClientID == c.Spec.Authentication.ClientID {
			return nil
		}
		audiences, err := p.audiences(ctx)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("%s: %w", PluginName, err))
		}
		if id := c.Spec.Authentication.ClientID; slices.Contains(audiences, id) {
			return apierrors.NewInvalid(ichor.Kind("TalosCluster"), a.GetName(), field.ErrorList{field.Invalid(
				field.NewPath("spec", "authentication", "clientID"), id,
				"the management plane's kube-apiserver accepts tokens for this audience (IchorInstallation spec.settings.managementAudiences), "+
					"and this cluster's kube-apiserver would see the tokens its users send it: register a client of its own for this cluster at the provider")})
		}
	case ichor.Resource("ichorinstallations"):
		if sub != "" && sub != "settings" {
			return nil
		}
		in, ok := a.GetObject().(*ichor.IchorInstallation)
		if !ok {
			return nil
		}
		return p.validateInstallation(a.GetName(), in)
	}
	return nil
}

// validateInstallation refuses audiences some cluster already trusts.
func (p *Plugin) validateInstallation(name string, in *ichor.IchorInstallation) error {
	audiences := withDefault(in.Spec.Settings.ManagementAudiences)
	clusters, err := p.clusters.List(labels.Everything())
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("%s: list TalosClusters: %w", PluginName, err))
	}
	var trusting []string
	for _, c := range clusters {
		if auth := c.Spec.Authentication; auth != nil && slices.Contains(audiences, auth.ClientID) {
			trusting = append(trusting, fmt.Sprintf("%s/%s (%s)", c.Namespace, c.Name, auth.ClientID))
		}
	}
	if len(trusting) == 0 {
		return nil
	}
	slices.Sort(trusting)
	return apierrors.NewInvalid(ichor.Kind("IchorInstallation"), name, field.ErrorList{field.Invalid(
		field.NewPath("spec", "settings", "managementAudiences"), in.Spec.Settings.ManagementAudiences,
		"TalosClusters trust these audiences: "+strings.Join(trusting, ", ")+
			"; give each its own client (talosclusters/authentication) first, so that no managed cluster sees a token the management plane accepts")})
}

// audiences are the management audiences, from the informer, or fresh
// from storage when the informer has no installation (not yet synced).
func (p *Plugin) audiences(ctx context.Context) ([]string, error) {
	read := initializer.Installation{Lister: p.installations, Client: p.client}
	in, err := read.Get(ctx, false)
	if in == nil && err == nil {
		in, err = read.Get(ctx, true)
	}
	if err != nil {
		return nil, err
	}
	if in == nil {
		return withDefault(nil), nil
	}
	return withDefault(in.Spec.Settings.ManagementAudiences), nil
}

// withDefault adds Ichor's own issuer's default audience, which counts
// whatever the installation says.
func withDefault(audiences []string) []string {
	if slices.Contains(audiences, ichor.DefaultTokenAudience) {
		return audiences
	}
	return append(slices.Clone(audiences), ichor.DefaultTokenAudience)
}
