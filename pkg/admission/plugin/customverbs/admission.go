// Package customverbs checks the custom RBAC verbs of Ichor's actions. A
// write that is an action — approving a machine, starting an operation,
// reclaiming a machine, overriding a safety check — needs, beyond the HTTP
// method's verb, the action's own verb, asked of the delegated authorizer for
// the object the request names, the way kube-apiserver checks `approve` on a
// CSR's signer: `approve` on talosmachines/approval, `reclaim` on
// machinereclaims and `override` on the overridden resource (`start` on
// talosoperations/<type> depends on the stored operation, so the storage
// asks it inside its update). RBAC rules can then grant exactly one action,
// and `kubectl auth can-i start talosoperations --subresource=ca-rotation`
// tells the truth. A create that sets a field only its subresource writes
// (talosclusters/secret-references, …) needs that subresource's update verb.
// A TalosCredentialRequest likewise needs the `download` verb its purpose
// stands for: nobody gets a Talos certificate for more than they could
// download through Ichor. Two writes need an admin's verb only when they
// undo an admin's decision: weakening a cluster's spec.security (update on
// talosclusters/security-downgrade), and deleting an operation someone
// started that has not ended (start on talosoperations/<type>).
package customverbs

import (
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// PluginName names the plugin in --enable-admission-plugins and friends.
const PluginName = "IchorCustomVerbs"

// action is one subresource write that needs a custom verb.
type action struct {
	resource, subresource string
	operation             admission.Operation
	verb                  string
}

// actions are the subresource writes this plugin guards with a custom verb:
// the approval, a subresource (its privileged half depends on the cluster,
// which admission reads). The verbs of actions (start, reclaim, override,
// the password's grant) are asked by the storage inside its update, of the
// object it changes (resource.Action.Verb).
var actions = []action{
	{resource: "talosmachines", subresource: "approval", operation: admission.Update, verb: ichor.VerbApprove},
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
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
}

// SetAuthorizer receives the server's (delegated) authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// SetIchorClient receives the client that reads a machine's cluster.
func (p *Plugin) SetIchorClient(c versioned.Interface) { p.client = c }

// ValidateInitialization refuses to run without an authorizer and a client.
func (p *Plugin) ValidateInitialization() error {
	if p.authorizer == nil || p.client == nil {
		return errors.New(PluginName + " needs an authorizer and an Ichor client")
	}
	return nil
}

// Validate asks the authorizer for the custom verb of a guarded write, for the
// object as the request names it (the stored one, for an update).
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	gvr := a.GetResource()
	if gvr.Group != ichor.GroupName {
		return nil
	}
	if a.GetOperation() == admission.Delete {
		return p.validateOperationDelete(ctx, a)
	}
	if err := p.validateSecurityDowngrade(ctx, a, o); err != nil {
		return err
	}
	if gvr.Resource == "taloscredentialrequests" && a.GetSubresource() == "" && a.GetOperation() == admission.Create {
		return p.validatePurpose(ctx, a)
	}
	if a.GetSubresource() == "" && a.GetOperation() == admission.Create {
		if err := p.validateReclaimSource(ctx, a); err != nil {
			return err
		}
		if err := p.validateUploadBackup(ctx, a); err != nil {
			return err
		}
		return p.validateFieldSubresources(ctx, a, o)
	}
	for _, act := range actions {
		if act.resource != gvr.Resource || act.subresource != a.GetSubresource() || act.operation != a.GetOperation() {
			continue
		}
		if err := p.authorize(ctx, a, act.verb, act.subresource, fmt.Sprintf("%s %s/%s %q", act.verb, act.resource, act.subresource, a.GetName())); err != nil {
			return err
		}
		if act.subresource == "approval" {
			return p.validatePrivilegedApproval(ctx, a)
		}
		return nil
	}
	return nil
}
