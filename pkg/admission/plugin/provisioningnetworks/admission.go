// Package provisioningnetworks keeps TalosMachines inside the provisioning
// networks an admin configured (IchorInstallation spec.settings.provisioningNetworks,
// or a namespace's own in namespaceProvisioningNetworks, where namespaces
// are tenants).
// Approving a machine sends its rendered config, which for a control plane
// holds every CA key, to the address in its spec, and the first contact
// trusts whatever certificate answers there: so whoever may write a
// machine's address must not be able to point it anywhere. An address
// outside those networks, or a DNS name (which resolves wherever its owner
// likes), needs the override verb on talosmachines, which admins hold; it
// is let through with a warning and an audit annotation naming the user.
package provisioningnetworks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/warning"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
	listers "ichor.dev/ichor/pkg/generated/listers/ichor/v1alpha1"
)

// PluginName names the plugin in --enable-admission-plugins and friends.
const PluginName = "IchorProvisioningNetworks"

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin is the provisioning-network check of TalosMachine addresses.
type Plugin struct {
	*admission.Handler
	authorizer    authorizer.Authorizer
	client        versioned.Interface
	installations listers.IchorInstallationLister
}

var (
	_ admission.ValidationInterface        = &Plugin{}
	_ genericadmissioninit.WantsAuthorizer = &Plugin{}
	_ initializer.WantsIchorClient         = &Plugin{}
	_ initializer.WantsIchorInformers      = &Plugin{}
)

// New returns the plugin; it needs an authorizer and a client before use.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetAuthorizer receives the server's (delegated) authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// SetIchorClient receives the client that reads the installation.
func (p *Plugin) SetIchorClient(c versioned.Interface) { p.client = c }

// SetIchorInformers receives the informers the installation is read from first.
func (p *Plugin) SetIchorInformers(f externalversions.SharedInformerFactory) {
	p.installations = f.Ichor().V1alpha1().IchorInstallations().Lister()
}

// ValidateInitialization refuses to run without an authorizer, a client and informers.
func (p *Plugin) ValidateInitialization() error {
	if p.authorizer == nil || p.client == nil || p.installations == nil {
		return errors.New(PluginName + " needs an authorizer, an Ichor client and informers")
	}
	return nil
}

// Validate checks the address of a TalosMachine being created or given a new address.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != ichor.Resource("talosmachines") || a.GetSubresource() != "" {
		return nil
	}
	m, ok := a.GetObject().(*ichor.TalosMachine)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("%s expected a TalosMachine, got %T", PluginName, a.GetObject()))
	}
	if old, ok := a.GetOldObject().(*ichor.TalosMachine); ok && old.Spec.Address == m.Spec.Address {
		return nil
	}
	// The informer answers first; an address it puts outside (or an
	// informer not yet synced) is looked up again in storage before the
	// refusal, so a network an admin just added counts at once (one just
	// removed may count for the watch's delay, milliseconds).
	var why string
	for _, fresh := range []bool{false, true} {
		networks, err := p.networks(ctx, fresh, a.GetNamespace())
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("%s: %w", PluginName, err))
		}
		var inside bool
		if why, inside = Contains(networks, m.Spec.Address); inside {
			return nil
		}
	}
	decision, reason, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: a.GetUserInfo(), Verb: ichor.VerbOverride, Namespace: a.GetNamespace(),
		APIGroup: ichor.GroupName, APIVersion: a.GetResource().Version, Resource: "talosmachines",
		Name: a.GetName(), ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		warning.AddWarning(ctx, "", fmt.Sprintf("TalosMachine %s: %s; let through because %s holds the override verb on talosmachines",
			a.GetName(), why, a.GetUserInfo().GetName()))
		if err := a.AddAnnotation(ichor.AuditAnnotationProvisioningNetworkOverride, fmt.Sprintf("%s by %s: %s", ichor.CheckProvisioningNetwork, a.GetUserInfo().GetName(), why)); err != nil {
			return apierrors.NewInternalError(err)
		}
		return nil
	}
	detail := why + "; only an admin (the override verb on talosmachines) may place a machine there, or an admin adds its network to the IchorInstallation's " +
		"spec.settings.provisioningNetworks (or, for this namespace alone, namespaceProvisioningNetworks)"
	if reason != "" {
		detail += " (" + reason + ")"
	}
	if err != nil {
		detail += fmt.Sprintf(" (authorizer error: %v)", err)
	}
	return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(),
		field.Forbidden(field.NewPath("spec", "address"), detail))
}

// networks reads the provisioning networks of namespace, from the informer
// or fresh from storage: its own when the installation gives it some
// (namespaceProvisioningNetworks, for tenants), else the installation's;
// none when the installation does not exist (yet).
func (p *Plugin) networks(ctx context.Context, fresh bool, namespace string) ([]netip.Prefix, error) {
	in, err := initializer.Installation{Lister: p.installations, Client: p.client}.Get(ctx, fresh)
	if in == nil || err != nil {
		return nil, err
	}
	cidrs := in.Spec.Settings.ProvisioningNetworks
	for _, n := range in.Spec.Settings.NamespaceProvisioningNetworks {
		if n.Namespace == namespace {
			cidrs = n.Networks
		}
	}
	var out []netip.Prefix
	for _, c := range cidrs {
		prefix, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("IchorInstallation %s: provisioning network %q: %w", v1alpha1.InstallationName, c, err)
		}
		out = append(out, prefix)
	}
	return out, nil
}

// Contains says whether address (host:port) is an IP address inside one of
// networks, and if not, why not, in words for the requester.
func Contains(networks []netip.Prefix, address string) (string, bool) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Sprintf("address %s names a host, not an IP address, and a name resolves wherever its owner likes", address), false
	}
	ip = ip.Unmap()
	for _, n := range networks {
		if n.Contains(ip) {
			return "", true
		}
	}
	if len(networks) == 0 {
		return fmt.Sprintf("address %s: the installation has no provisioning networks", address), false
	}
	return fmt.Sprintf("address %s is outside the provisioning networks %v", address, networks), false
}
