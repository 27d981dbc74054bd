// Package patchsecrets refuses TalosConfigPatches that touch the cluster's
// secrets bundle — its CAs, keys and tokens. Those come only from the bundle
// Secret and change only through rotation operations; a patch is stored in
// the clear and would otherwise let whoever may write patches replace a CA
// the cluster trusts.
package patchsecrets

import (
	"context"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/render"
)

// PluginName names the plugin in --enable-admission-plugins and friends.
const PluginName = "IchorConfigPatchSecrets"

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin is the secrets check of TalosConfigPatches.
type Plugin struct {
	*admission.Handler
}

var _ admission.ValidationInterface = &Plugin{}

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// Validate refuses a patch, on the main endpoint, that sets, removes or
// copies a field of the secrets bundle, naming the fields.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != ichor.Resource("talosconfigpatches") || a.GetSubresource() != "" {
		return nil
	}
	patch, ok := a.GetObject().(*ichor.TalosConfigPatch)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("%s expected a TalosConfigPatch, got %T", PluginName, a.GetObject()))
	}
	old, isUpdate := a.GetOldObject().(*ichor.TalosConfigPatch)
	if isUpdate && old.Spec.Patch == patch.Spec.Patch {
		return nil // accepted when written; metadata and other fields may change
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
		if err := a.AddAnnotation(OverrideAnnotation, fmt.Sprintf("%s by %s: %s", g.Check, g.By, g.Reason)); err != nil {
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

// OverrideAnnotation is the audit annotation of a change let through by an override.
const OverrideAnnotation = "ichor.dev/override"
