package customverbs

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

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
