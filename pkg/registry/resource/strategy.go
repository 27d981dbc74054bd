package resource

import (
	"context"
	"fmt"
	"reflect"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// strategy is the create, update and delete strategy of a kind's main
// endpoint: it owns metadata and spec, and ignores any status sent to it.
type strategy[T Object] struct {
	runtime.ObjectTyper
	names.NameGenerator
	def        *Definition[T]
	apiVersion fieldpath.APIVersion
}

var (
	_ rest.RESTCreateStrategy  = &strategy[Object]{}
	_ rest.RESTUpdateStrategy  = &strategy[Object]{}
	_ rest.RESTDeleteStrategy  = &strategy[Object]{}
	_ rest.ResetFieldsStrategy = &strategy[Object]{}
)

func (s *strategy[T]) NamespaceScoped() bool { return s.def.NamespaceScoped }

// PrepareForCreate clears status, which only the status endpoint writes, and
// starts the generation at 1.
func (s *strategy[T]) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	status := statusOf(obj)
	status.Set(reflect.Zero(status.Type()))
	obj.(T).SetGeneration(1)
	if s.def.PrepareForCreate != nil {
		s.def.PrepareForCreate(ctx, obj.(T))
	}
}

// PrepareForUpdate keeps the stored status and bumps the generation when the spec changed.
func (s *strategy[T]) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	statusOf(obj).Set(statusOf(old))
	newObj, oldObj := obj.(T), old.(T)
	if s.def.PrepareForUpdate != nil {
		s.def.PrepareForUpdate(ctx, newObj, oldObj)
	}
	if !apiequality.Semantic.DeepEqual(specOf(obj).Interface(), specOf(old).Interface()) {
		newObj.SetGeneration(oldObj.GetGeneration() + 1)
	} else {
		newObj.SetGeneration(oldObj.GetGeneration())
	}
}

func (s *strategy[T]) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return s.def.Validate(obj.(T))
}

func (s *strategy[T]) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return s.def.ValidateUpdate(obj.(T), old.(T))
}

func (*strategy[T]) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

func (*strategy[T]) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

func (*strategy[T]) AllowCreateOnUpdate(context.Context) bool      { return false }
func (*strategy[T]) AllowUnconditionalUpdate(context.Context) bool { return true }
func (*strategy[T]) Canonicalize(runtime.Object)                   {}
func (s *strategy[T]) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	reset := append([]fieldpath.Path{fieldpath.MakePathOrDie("status")}, s.def.ServerOwnedFields...)
	return map[fieldpath.APIVersion]*fieldpath.Set{s.apiVersion: fieldpath.NewSet(reset...)}
}

// statusStrategy is the update strategy of /status: it owns status and
// keeps spec and the user-owned metadata as stored.
type statusStrategy[T Object] struct {
	*strategy[T]
}

var _ rest.RESTUpdateStrategy = statusStrategy[Object]{}

func (s statusStrategy[T]) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	specOf(obj).Set(specOf(old))
	keepUserMetadata(obj.(T), old.(T))
	if s.def.PrepareForStatusUpdate != nil {
		s.def.PrepareForStatusUpdate(ctx, obj.(T), old.(T))
	}
}

// keepUserMetadata keeps the metadata users own, and the generation, as
// stored: endpoints that write a part of the object never change them.
func keepUserMetadata[T Object](obj, old T) {
	obj.SetLabels(old.GetLabels())
	obj.SetAnnotations(old.GetAnnotations())
	obj.SetFinalizers(old.GetFinalizers())
	obj.SetOwnerReferences(old.GetOwnerReferences())
	obj.SetGeneration(old.GetGeneration())
}

func (s statusStrategy[T]) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return s.def.ValidateStatusUpdate(obj.(T), old.(T))
}

func (s statusStrategy[T]) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	reset := append([]fieldpath.Path{fieldpath.MakePathOrDie("spec")}, userMetadataPaths()...)
	reset = append(reset, s.def.StatusResetFields...)
	return map[fieldpath.APIVersion]*fieldpath.Set{s.apiVersion: fieldpath.NewSet(reset...)}
}

// userMetadataPaths are the metadata fields keepUserMetadata keeps.
func userMetadataPaths() []fieldpath.Path {
	return []fieldpath.Path{
		fieldpath.MakePathOrDie("metadata", "labels"),
		fieldpath.MakePathOrDie("metadata", "annotations"),
		fieldpath.MakePathOrDie("metadata", "finalizers"),
		fieldpath.MakePathOrDie("metadata", "ownerReferences"),
	}
}

// subresourceStrategy is the update strategy of one Subresource endpoint.
type subresourceStrategy[T Object] struct {
	*strategy[T]
	sub Subresource[T]
}

var _ rest.RESTUpdateStrategy = subresourceStrategy[Object]{}

func (s subresourceStrategy[T]) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newObj, oldObj := obj.(T), old.(T)
	finalizers := newObj.GetFinalizers()
	keepUserMetadata(newObj, oldObj)
	if s.sub.WritesFinalizers {
		newObj.SetFinalizers(finalizers)
	}
	s.sub.PrepareForUpdate(ctx, newObj, oldObj)
	// A subresource that writes a part of the spec changes the desired state.
	if !apiequality.Semantic.DeepEqual(specOf(obj).Interface(), specOf(old).Interface()) {
		newObj.SetGeneration(oldObj.GetGeneration() + 1)
	}
}

func (s subresourceStrategy[T]) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return s.sub.ValidateUpdate(obj.(T), old.(T))
}

func (s subresourceStrategy[T]) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	reset := append(userMetadataPaths(), s.sub.ResetFields...)
	return map[fieldpath.APIVersion]*fieldpath.Set{s.apiVersion: fieldpath.NewSet(reset...)}
}

// attrs returns the labels and selectable fields of an object for list and
// watch filtering.
func (d *Definition[T]) attrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	o, ok := obj.(T)
	if !ok {
		return nil, nil, fmt.Errorf("%s storage was given a %T", d.Resource, obj)
	}
	set := fields.Set{"metadata.name": o.GetName()}
	if d.NamespaceScoped {
		set["metadata.namespace"] = o.GetNamespace()
	}
	if d.SelectableFields != nil {
		generic.MergeFieldsSets(set, d.SelectableFields(o))
	}
	return labels.Set(o.GetLabels()), set, nil
}
