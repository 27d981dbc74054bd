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
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/authz"
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

// validatePrivilegedApproval asks approve on talosmachines/privileged-approval
// for an approval of a control plane, or of any machine of a cluster already
// bootstrapped (or that cannot be read: the check fails closed). The machine
// is the stored one the update changes; rejections hand out nothing.
func (p *Plugin) validatePrivilegedApproval(ctx context.Context, a admission.Attributes) error {
	m, okNew := a.GetObject().(*ichor.TalosMachine)
	old, okOld := a.GetOldObject().(*ichor.TalosMachine)
	if !okNew || !okOld || m.Status.Approval == nil || m.Status.Approval.Decision != ichor.ApprovalApproved {
		return nil
	}
	if prev := old.Status.Approval; prev != nil && prev.Decision == ichor.ApprovalApproved {
		return nil // repeating a decision changes nothing
	}
	why := ""
	switch {
	case old.Spec.Role == ichor.MachineRoleControlPlane:
		why = "a control plane receives every CA key of its cluster"
	case old.Spec.ClusterName == "":
		return nil // validation refuses an approval without a cluster
	default:
		c, err := p.client.IchorV1alpha1().TalosClusters(a.GetNamespace()).Get(ctx, old.Spec.ClusterName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			why = "TalosCluster " + old.Spec.ClusterName + " does not exist, so Ichor cannot tell it is not running"
		case err != nil:
			return apierrors.NewInternalError(fmt.Errorf("%s: read TalosCluster %s: %w", PluginName, old.Spec.ClusterName, err))
		case c.Status.BootstrappedAt != nil:
			why = "TalosCluster " + c.Name + " is bootstrapped, so the machine joins a running cluster with its bootstrap token"
		default:
			return nil
		}
	}
	return p.authorize(ctx, a, ichor.VerbApprove, ichor.PrivilegedApprovalSubresource,
		fmt.Sprintf("approve TalosMachine %q (%s)", a.GetName(), why))
}

// authorize asks verb on the request's resource (and subresource on) for the
// object the request names, and refuses with what needs saying.
func (p *Plugin) authorize(ctx context.Context, a admission.Attributes, verb, on, what string) error {
	return p.authorizeHeld(ctx, a, verb, on, what, "")
}

// authorizeHeld is authorize, its refusal ending with who holds the verb in
// Ichor's roles (artifacts/roles.yaml) when held is not "".
func (p *Plugin) authorizeHeld(ctx context.Context, a admission.Attributes, verb, on, what, held string) error {
	gvr := a.GetResource()
	name := a.GetName()
	if name == "" && a.GetOldObject() != nil {
		// A collection delete admits each object under the collection's name, "".
		if m, err := meta.Accessor(a.GetOldObject()); err == nil {
			name = m.GetName()
		}
	}
	decision, reason, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User:            a.GetUserInfo(),
		Verb:            verb,
		Namespace:       a.GetNamespace(),
		APIGroup:        gvr.Group,
		APIVersion:      gvr.Version,
		Resource:        gvr.Resource,
		Subresource:     on,
		Name:            name,
		ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return nil
	}
	target := fmt.Sprintf("resource %q", gvr.Resource)
	if on != "" {
		target += fmt.Sprintf(", subresource %q", on)
	}
	msg := fmt.Sprintf("user %q cannot %s: it needs the %q verb on %s", a.GetUserInfo().GetName(), what, verb, target)
	if held != "" {
		msg += " (" + held + ")"
	}
	msg = authz.Denied(msg, reason, err)
	return admission.NewForbidden(a, errors.New(msg))
}

// validateUploadBackup checks that the creator of a TalosBackup that awaits
// an uploaded snapshot (spec.upload) may upload it: create on
// talosbackups/upload, an admin's. Nothing but that upload fills such a
// backup, so one an operator created would only wait, and a snapshot is
// what a restore writes into a cluster's etcd.
func (p *Plugin) validateUploadBackup(ctx context.Context, a admission.Attributes) error {
	b, ok := a.GetObject().(*ichor.TalosBackup)
	if !ok || a.GetResource().Resource != "talosbackups" || b.Spec.Upload == nil {
		return nil
	}
	return p.authorize(ctx, a, "create", v1alpha1.UploadSubresource, fmt.Sprintf("create TalosBackup %q awaiting an upload", a.GetName()))
}

// validateReclaimSource checks that the creator of a MachineReclaim of a
// managed machine may delete that machine where it is: a reclaim resets it
// and takes it away, which is what deleting it does, and its namespace may
// be one the creator has no rights in. (The spec never changes after create.)
func (p *Plugin) validateReclaimSource(ctx context.Context, a admission.Attributes) error {
	r, ok := a.GetObject().(*ichor.MachineReclaim)
	if !ok || a.GetResource().Resource != "machinereclaims" {
		return nil
	}
	if u := r.Spec.Unmanaged; u != nil && r.Spec.MachineRef == nil {
		return p.validateReclaimTalosconfig(ctx, a, u.TalosconfigSecretRef.Name)
	}
	if r.Spec.MachineRef == nil {
		return nil
	}
	ref := r.Spec.MachineRef
	decision, reason, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: a.GetUserInfo(), Verb: "delete", Namespace: ref.Namespace, APIGroup: ichor.GroupName,
		APIVersion: a.GetResource().Version, Resource: "talosmachines", Name: ref.Name, ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return nil
	}
	msg := fmt.Sprintf("user %q cannot reclaim TalosMachine %s/%s: reclaiming resets it, which needs the \"delete\" verb on talosmachines %q in namespace %q",
		a.GetUserInfo().GetName(), ref.Namespace, ref.Name, ref.Name, ref.Namespace)
	msg = authz.Denied(msg, reason, err)
	return admission.NewForbidden(a, errors.New(msg))
}

// validateReclaimTalosconfig checks that the creator of a reclaim of an
// unmanaged node may read and delete the talosconfig Secret it hands over:
// ichor-controller uses that credential and then deletes it, so naming a
// Secret one could not would use, and destroy, someone else's.
func (p *Plugin) validateReclaimTalosconfig(ctx context.Context, a admission.Attributes, secret string) error {
	for _, verb := range []string{"get", "delete"} {
		decision, reason, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
			User: a.GetUserInfo(), Verb: verb, Namespace: a.GetNamespace(), APIVersion: "v1",
			Resource: "secrets", Name: secret, ResourceRequest: true,
		})
		if decision == authorizer.DecisionAllow {
			continue
		}
		msg := fmt.Sprintf("user %q cannot hand over Secret %q: the talosconfig it holds is used and then deleted, which needs the \"get\" and \"delete\" verbs on secrets %q in namespace %q",
			a.GetUserInfo().GetName(), secret, secret, a.GetNamespace())
		msg = authz.Denied(msg, reason, err)
		return admission.NewForbidden(a, errors.New(msg))
	}
	return nil
}

// validateFieldSubresources checks a create that sets a field only its
// subresource writes (ichor.FieldSubresources): the requester needs the
// update verb on that subresource, as for a change, or an operator could
// create a cluster that shares another cluster's secrets bundle. A field
// left at its default needs nothing.
func (p *Plugin) validateFieldSubresources(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	var defaulted runtime.Object
	for _, f := range ichor.FieldSubresources {
		if f.Resource != a.GetResource().Resource || f.Shared {
			continue
		}
		if defaulted == nil {
			var err error
			if defaulted, err = defaultedEmpty(a, o); err != nil {
				return apierrors.NewInternalError(fmt.Errorf("%s: %w", PluginName, err))
			}
		}
		if apiequality.Semantic.DeepEqual(f.Value(a.GetObject()), f.Value(defaulted)) {
			continue
		}
		if err := p.authorize(ctx, a, ichor.VerbUpdate, f.Subresource, fmt.Sprintf("set %s on create", f.Field)); err != nil {
			return err
		}
	}
	return nil
}

// defaultedEmpty is an empty object of the request's kind with the API's
// defaults applied, in the internal form admission sees.
func defaultedEmpty(a admission.Attributes, o admission.ObjectInterfaces) (runtime.Object, error) {
	gvk := a.GetKind()
	versioned, err := o.GetObjectCreater().New(gvk)
	if err != nil {
		return nil, fmt.Errorf("new %s: %w", gvk, err)
	}
	o.GetObjectDefaulter().Default(versioned)
	internal := a.GetObject().DeepCopyObject()
	if err := o.GetObjectConvertor().Convert(versioned, internal, nil); err != nil {
		return nil, fmt.Errorf("convert a defaulted %s: %w", gvk, err)
	}
	return internal, nil
}

// validatePurpose checks that the requester of a TalosCredentialRequest holds
// every right its purpose's certificate gives (purposeRights): on the cluster
// (talosconfig-reader), on each machine named (all machines of the namespace
// when none is), or on the whole namespace for a right a certificate valid on
// every node gives everywhere.
func (p *Plugin) validatePurpose(ctx context.Context, a admission.Attributes) error {
	req, ok := a.GetObject().(*ichor.TalosCredentialRequest)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("%s expected a TalosCredentialRequest, got %T", PluginName, a.GetObject()))
	}
	rule, ok := ichor.CredentialPurposes[req.Spec.Purpose]
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("purpose %q grants no credential", req.Spec.Purpose))
	}
	for _, r := range rule.Rights {
		names := req.Spec.Machines
		switch {
		case r.Resource == "talosclusters":
			names = []string{req.Spec.ClusterName}
		case r.EveryMachine || len(names) == 0:
			names = []string{""} // every object of the resource in the namespace
		}
		for _, name := range names {
			decision, reason, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
				User:            a.GetUserInfo(),
				Verb:            r.Verb,
				Namespace:       a.GetNamespace(),
				APIGroup:        ichor.GroupName,
				APIVersion:      a.GetResource().Version,
				Resource:        r.Resource,
				Subresource:     r.Subresource,
				Name:            name,
				ResourceRequest: true,
			})
			if decision == authorizer.DecisionAllow {
				continue
			}
			target := fmt.Sprintf("%s/%s %q", r.Resource, r.Subresource, name)
			if name == "" {
				target = fmt.Sprintf("%s/%s of every %s in the namespace", r.Resource, r.Subresource, strings.TrimSuffix(r.Resource, "s"))
			}
			msg := fmt.Sprintf("user %q cannot request a %s credential: it needs the %q verb on %s", a.GetUserInfo().GetName(), req.Spec.Purpose, r.Verb, target)
			msg = authz.Denied(msg, reason, err)
			return admission.NewForbidden(a, errors.New(msg))
		}
	}
	return nil
}
