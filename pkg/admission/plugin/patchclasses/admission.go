// Package patchclasses keeps each TalosConfigPatch to the class of fields
// its writer may change (render.PatchClass, decided on the patch's effect on
// a rendered config, whatever the patch's form). A patch that touches the
// cluster's secrets bundle — its CAs, keys and tokens — is refused to
// everyone: those come only from the bundle Secret and change only through
// rotation operations, and a patch is stored in the clear; an admin may let
// one change of an existing patch through with an override. A patch that
// runs code with a node's privileges or changes whom it trusts (static pods,
// manifests, host mounts, files, the installer image, component flags, Talos
// API access, registries) needs the update verb on
// talosconfigpatches/privileged, which only admins hold: whoever can run code
// on a control plane holds the cluster's root of trust. That verb is needed
// for every write of such a patch — creating it, changing any of its spec
// (retargeting or enabling it) and deleting it (which reverts those fields) —
// and for every write of a TalosMachine whose name or labels change which
// privileged patches select it (see validateMachine).
package patchclasses

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/warning"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/authz"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/render"
)

// PluginName names the plugin in --enable-admission-plugins and friends.
const PluginName = "IchorConfigPatchClasses"

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin is the class check of TalosConfigPatches.
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

// New returns the plugin; it needs an authorizer and the Ichor client before use.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
}

// SetAuthorizer receives the server's (delegated) authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// SetIchorClient implements initializer.WantsIchorClient; the machine check
// reads the patches fresh from storage.
func (p *Plugin) SetIchorClient(c versioned.Interface) { p.client = c }

// ValidateInitialization refuses to run without an authorizer and the Ichor client.
func (p *Plugin) ValidateInitialization() error {
	if p.authorizer == nil || p.client == nil {
		return errors.New(PluginName + " needs an authorizer and an Ichor client")
	}
	return nil
}

// Validate checks a write of a patch on the main endpoint: a privileged
// patch needs the privileged verb, and a patch that sets, removes or copies a
// field of the secrets bundle is refused, naming the fields.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil // subresources keep labels and patches as stored
	}
	switch a.GetResource().GroupResource() {
	case ichor.Resource("talosconfigpatches"):
	case ichor.Resource("talosmachines"):
		if a.GetOperation() == admission.Delete {
			return nil // deleting a machine is an admin's already
		}
		return p.validateMachine(ctx, a)
	default:
		return nil
	}
	if a.GetOperation() == admission.Delete {
		old, ok := a.GetOldObject().(*ichor.TalosConfigPatch)
		if !ok {
			return nil // the storage answers NotFound
		}
		return p.checkPrivileged(ctx, a, old, "delete")
	}
	patch, ok := a.GetObject().(*ichor.TalosConfigPatch)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("%s expected a TalosConfigPatch, got %T", PluginName, a.GetObject()))
	}
	old, isUpdate := a.GetOldObject().(*ichor.TalosConfigPatch)
	if isUpdate && apiequality.Semantic.DeepEqual(old.Spec, patch.Spec) {
		return nil // metadata only
	}
	if err := p.checkPrivileged(ctx, a, patch, map[bool]string{true: "change", false: "create"}[isUpdate]); err != nil {
		return err
	}
	if isUpdate && old.Spec.Patch == patch.Spec.Patch {
		return nil // the bundle check passed when the text was written
	}
	path := field.NewPath("spec", "patch")
	touched, err := render.TouchedSecrets(patch.Spec.Patch)
	var errs field.ErrorList
	switch {
	case err != nil:
		errs = append(errs, field.Invalid(path, field.OmitValueType{}, fmt.Sprintf("cannot be read as a Talos config patch: %v", err)))
	case len(touched) > 0 && isUpdate && old.Status.Override != nil && old.Status.Override.Check == ichor.CheckPatchSecrets:
		// An admin let this change through (talosconfigpatches/override); the
		// update consumes the override.
		g := old.Status.Override
		warning.AddWarning(ctx, "", fmt.Sprintf("TalosConfigPatch %s touches the cluster's secrets bundle (%s), as %s allowed (%s)",
			patch.Name, strings.Join(touched, ", "), g.By, g.Reason))
		if err := a.AddAnnotation(ichor.AuditAnnotationOverride, fmt.Sprintf("%s by %s: %s", g.Check, g.By, g.Reason)); err != nil {
			return apierrors.NewInternalError(err)
		}
		return nil
	case len(touched) > 0:
		errs = append(errs, field.Forbidden(path, fmt.Sprintf("touches the cluster's secrets bundle (%s); CAs, keys and tokens change only through the bundle Secret and rotation operations; an admin may let one change of an existing patch through with its override subresource (check %s)",
			strings.Join(touched, ", "), ichor.CheckPatchSecrets)))
	default:
		return nil
	}
	return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), errs)
}

// checkPrivileged asks for the privileged verb when patch, the patch as
// written (or, for a delete, as stored), writes a field of the privileged class.
func (p *Plugin) checkPrivileged(ctx context.Context, a admission.Attributes, patch *ichor.TalosConfigPatch, what string) error {
	fields, err := render.ClassifyPatch(patch.Spec.Patch)
	if err != nil {
		if a.GetOperation() == admission.Delete {
			// A stored patch that no longer reads writes nothing, and is deletable.
			return nil
		}
		return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), field.ErrorList{field.Invalid(field.NewPath("spec", "patch"), field.OmitValueType{},
			fmt.Sprintf("cannot be read as a Talos config patch: %v", err))})
	}
	privileged := render.FieldsOf(fields, render.ClassPrivileged)
	if len(privileged) == 0 {
		return nil
	}
	decision, reason, err := p.authorizePrivileged(ctx, a, a.GetName())
	if decision == authorizer.DecisionAllow {
		return nil
	}
	msg := fmt.Sprintf("user %q cannot %s TalosConfigPatch %s: it writes fields that run code with the nodes' privileges or change whom they trust: %s; that needs the %q verb on talosconfigpatches/%s (admins hold it)",
		a.GetUserInfo().GetName(), what, a.GetName(), strings.Join(privileged, ", "), ichor.VerbUpdate, ichor.PrivilegedPatchSubresource)
	msg = authz.Denied(msg, reason, err)
	return admission.NewForbidden(a, errors.New(msg))
}

// authorizePrivileged asks whether the requester holds the privileged verb
// on the named patch.
func (p *Plugin) authorizePrivileged(ctx context.Context, a admission.Attributes, patch string) (authorizer.Decision, string, error) {
	return p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: a.GetUserInfo(), Verb: ichor.VerbUpdate, Namespace: a.GetNamespace(), APIGroup: ichor.GroupName,
		APIVersion: a.GetResource().Version, Resource: "talosconfigpatches", Subresource: ichor.PrivilegedPatchSubresource,
		Name: patch, ResourceRequest: true,
	})
}
