// Package customverbs checks the custom RBAC verbs of Ichor's actions. A
// write that is an action — approving a machine, starting an operation,
// reclaiming a machine, overriding a safety check — needs, beyond the HTTP
// method's verb, the action's own verb, asked of the delegated authorizer for
// the object the request names, the way kube-apiserver checks `approve` on a
// CSR's signer: `approve` on talosmachines/approval, `start` on
// talosoperations/<type> (the stored operation's type, so that destructive
// types can be kept for admins), `reclaim` on machinereclaims and `override`
// on the overridden resource. RBAC rules can then grant exactly one action,
// and `kubectl auth can-i start talosoperations --subresource=ca-rotation`
// tells the truth. A TalosCredentialRequest likewise needs the `download`
// verb its purpose stands for: nobody gets a Talos certificate for more than
// they could download through Ichor.
package customverbs

import (
	"context"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// PluginName names the plugin in --enable-admission-plugins and friends.
const PluginName = "IchorCustomVerbs"

// Custom verbs.
const (
	// VerbApprove is the verb on talosmachines/approval that decides about a machine.
	VerbApprove = "approve"
	// VerbStart is the verb on talosoperations/<type> that starts an operation of that type.
	VerbStart = "start"
	// VerbReclaim is the verb on machinereclaims that starts a reclaim.
	VerbReclaim = "reclaim"
	// VerbOverride is the verb on talosclusters, talosmachines and
	// talosconfigpatches that lets the next change past a safety check.
	VerbOverride = "override"
	// VerbDownload is the verb on a download subresource (talosmachines/etcd-snapshot, …). A
	// TalosCredentialRequest for a purpose needs it on the download the purpose stands for.
	VerbDownload = "download"
)

// download is the subresource whose download verb a credential purpose needs.
type download struct{ resource, subresource string }

// purposeDownloads says what each TalosCredentialRequest purpose lets its
// holder do, as the download subresource that does the same through Ichor:
// nobody gets a Talos certificate for more than they could download.
var purposeDownloads = map[ichor.CredentialPurpose]download{
	ichor.PurposeTalosconfigReader: {"talosclusters", "talosconfig-reader"},
	ichor.PurposeSupportBundle:     {"talosmachines", "support-bundle"},
	ichor.PurposeEtcdSnapshot:      {"talosmachines", "etcd-snapshot"},
	ichor.PurposePacketCapture:     {"talosmachines", "packet-capture"},
}

// action is one subresource write that needs a custom verb.
type action struct {
	resource, subresource string
	operation             admission.Operation
	verb                  string
	// on returns the subresource the verb is asked on; nil asks on the
	// request's own subresource, "" on the resource itself.
	on func(ctx context.Context, p *Plugin, a admission.Attributes) (string, error)
}

// onResource asks the verb on the resource itself.
func onResource(context.Context, *Plugin, admission.Attributes) (string, error) { return "", nil }

// onOperationType asks the verb on talosoperations/<type>, the type of the
// stored operation (a spec field that never changes).
func onOperationType(ctx context.Context, p *Plugin, a admission.Attributes) (string, error) {
	op, err := p.client.IchorV1alpha1().TalosOperations(a.GetNamespace()).Get(ctx, a.GetName(), metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return string(op.Spec.Type), nil
}

// actions are every subresource write this plugin guards.
var actions = []action{
	{resource: "talosmachines", subresource: "approval", operation: admission.Update, verb: VerbApprove},
	{resource: "talosoperations", subresource: "start", operation: admission.Create, verb: VerbStart, on: onOperationType},
	{resource: "machinereclaims", subresource: "reclaim", operation: admission.Create, verb: VerbReclaim, on: onResource},
	{resource: "talosclusters", subresource: "override", operation: admission.Create, verb: VerbOverride, on: onResource},
	{resource: "talosmachines", subresource: "override", operation: admission.Create, verb: VerbOverride, on: onResource},
	{resource: "talosconfigpatches", subresource: "override", operation: admission.Create, verb: VerbOverride, on: onResource},
}

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin is the custom-verb admission check.
type Plugin struct {
	*admission.Handler
	authorizer authorizer.Authorizer
	client     versioned.Interface
}

var (
	_ admission.ValidationInterface        = &Plugin{}
	_ admission.InitializationValidator    = &Plugin{}
	_ genericadmissioninit.WantsAuthorizer = &Plugin{}
	_ initializer.WantsIchorClient         = &Plugin{}
)

// New returns the plugin; it needs an authorizer before use.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetAuthorizer receives the server's (delegated) authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// SetIchorClient receives the client that reads the stored objects.
func (p *Plugin) SetIchorClient(c versioned.Interface) { p.client = c }

// ValidateInitialization refuses to run without an authorizer and a client.
func (p *Plugin) ValidateInitialization() error {
	if p.authorizer == nil {
		return errors.New(PluginName + " needs an authorizer")
	}
	if p.client == nil {
		return errors.New(PluginName + " needs an Ichor client")
	}
	return nil
}

// Validate asks the authorizer for the custom verb of a guarded write, for the
// object as the request names it (the stored one, for an update).
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	gvr := a.GetResource()
	if gvr.Group != ichor.GroupName {
		return nil
	}
	if gvr.Resource == "taloscredentialrequests" && a.GetSubresource() == "" && a.GetOperation() == admission.Create {
		return p.validatePurpose(ctx, a)
	}
	for _, act := range actions {
		if act.resource != gvr.Resource || act.subresource != a.GetSubresource() || act.operation != a.GetOperation() {
			continue
		}
		on := act.subresource
		if act.on != nil {
			var err error
			if on, err = act.on(ctx, p, a); apierrors.IsNotFound(err) {
				return nil // the storage answers NotFound
			} else if err != nil {
				return apierrors.NewInternalError(fmt.Errorf("%s: read %s %q: %w", PluginName, act.resource, a.GetName(), err))
			}
		}
		decision, reason, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
			User:            a.GetUserInfo(),
			Verb:            act.verb,
			Namespace:       a.GetNamespace(),
			APIGroup:        gvr.Group,
			APIVersion:      gvr.Version,
			Resource:        gvr.Resource,
			Subresource:     on,
			Name:            a.GetName(),
			ResourceRequest: true,
		})
		if decision == authorizer.DecisionAllow {
			return nil
		}
		target := fmt.Sprintf("resource %q", act.resource)
		if on != "" {
			target += fmt.Sprintf(", subresource %q", on)
		}
		msg := fmt.Sprintf("user %q cannot %s %s/%s %q: it needs the %q verb on %s",
			a.GetUserInfo().GetName(), act.verb, act.resource, act.subresource, a.GetName(), act.verb, target)
		if reason != "" {
			msg += ": " + reason
		}
		if err != nil {
			msg += fmt.Sprintf(" (authorizer error: %v)", err)
		}
		return admission.NewForbidden(a, errors.New(msg))
	}
	return nil
}

// validatePurpose checks that the requester of a TalosCredentialRequest holds
// the download verb the purpose stands for, on the cluster (talosconfig-reader)
// or on each machine named (all machines of the namespace when none is).
func (p *Plugin) validatePurpose(ctx context.Context, a admission.Attributes) error {
	req, ok := a.GetObject().(*ichor.TalosCredentialRequest)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("%s expected a TalosCredentialRequest, got %T", PluginName, a.GetObject()))
	}
	d, ok := purposeDownloads[req.Spec.Purpose]
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("purpose %q grants no credential", req.Spec.Purpose))
	}
	names := req.Spec.Machines
	if d.resource == "talosclusters" {
		names = []string{req.Spec.ClusterName}
	} else if len(names) == 0 {
		names = []string{""} // the whole cluster: every machine in the namespace
	}
	for _, name := range names {
		decision, reason, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
			User:            a.GetUserInfo(),
			Verb:            VerbDownload,
			Namespace:       a.GetNamespace(),
			APIGroup:        ichor.GroupName,
			APIVersion:      a.GetResource().Version,
			Resource:        d.resource,
			Subresource:     d.subresource,
			Name:            name,
			ResourceRequest: true,
		})
		if decision == authorizer.DecisionAllow {
			continue
		}
		target := fmt.Sprintf("%s/%s %q", d.resource, d.subresource, name)
		if name == "" {
			target = fmt.Sprintf("%s/%s of every machine in the namespace", d.resource, d.subresource)
		}
		msg := fmt.Sprintf("user %q cannot request a %s credential: it needs the %q verb on %s", a.GetUserInfo().GetName(), req.Spec.Purpose, VerbDownload, target)
		if reason != "" {
			msg += ": " + reason
		}
		if err != nil {
			msg += fmt.Sprintf(" (authorizer error: %v)", err)
		}
		return admission.NewForbidden(a, errors.New(msg))
	}
	return nil
}
