package resource

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/authz"
	"ichor.dev/ichor/pkg/events"
)

// Action is a named create on an object, POST …/NAME/<Name>: the request
// body asks for a state change, which the action makes to the stored object
// through its own rule (start an operation, override a safety check). The
// response is the changed object; the body itself is never stored.
type Action[T Object] struct {
	// Name is the path element after the object's name (start).
	Name string
	// NewBody returns an empty request body; its kind is the endpoint's.
	NewBody func() runtime.Object
	// Apply changes obj, a copy of the stored object, as body asks, or
	// returns an API error saying why it cannot. It may change status only:
	// spec and the user-owned metadata are kept as stored.
	Apply func(ctx context.Context, obj T, body runtime.Object) error
	// Event, when set, describes the Event recorded on the object after a
	// successful (not dry-run) action.
	Event func(ctx context.Context, obj T, body runtime.Object) ActionEvent
	// Replace serves the action as PUT (RBAC verb update) rather than POST
	// (verb create): for actions that set a value, like a password.
	Replace bool
	// Verb is the custom verb the requester must hold, beyond create (or
	// update) on the action's own path, so that RBAC can grant exactly this
	// action: on the resource, or on the subresource VerbOn names for the
	// stored object (start on talosoperations/<type>). It is asked inside
	// the storage update, of the very object the action changes, so a create
	// or a change racing the request cannot make it decide on another
	// object; any answer but an allow refuses (Forbidden). Every action has
	// one: a definition without it does not build.
	Verb   string
	VerbOn func(obj T) string
}

// ActionEvent is the Event an action leaves on its object: its type is
// the reason's, in v1alpha1's table.
type ActionEvent struct {
	Reason  v1alpha1.EventReason
	Message string
}

// ActionREST serves one Action of a kind.
type ActionREST[T Object] struct {
	store      *genericregistry.Store
	action     Action[T]
	kind       schema.GroupVersionKind
	recorder   events.EventRecorder
	authorizer authorizer.Authorizer
}

var (
	_ rest.NamedCreater = &ActionREST[Object]{}
	_ rest.Storage      = &ActionREST[Object]{}
)

// New returns an empty request body.
func (r *ActionREST[T]) New() runtime.Object { return r.action.NewBody() }

// Destroy does nothing: the main endpoint owns the storage.
func (r *ActionREST[T]) Destroy() {}

// Create runs the action on the object name. Admission (createValidation)
// sees the request body, as for any create; the action reads the stored
// object itself, under the storage's optimistic concurrency.
func (r *ActionREST[T]) Create(ctx context.Context, name string, body runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if err := checkBodyName(body, name); err != nil {
		return nil, err
	}
	if createValidation != nil {
		if err := createValidation(ctx, body.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	return r.run(ctx, name, body, options.DryRun, options.FieldManager)
}

// PreserveRequestObjectMetaSystemFieldsOnSubresourceCreate keeps the
// body's metadata.uid, which the create handler would otherwise wipe: run
// holds it as a precondition.
func (r *ActionREST[T]) PreserveRequestObjectMetaSystemFieldsOnSubresourceCreate() bool { return true }

var _ rest.SubresourceObjectMetaPreserver = &ActionREST[Object]{}

// checkBodyName refuses a body that names another object than the URL.
func checkBodyName(body runtime.Object, name string) error {
	if m, err := meta.Accessor(body); err == nil && m.GetName() != "" && m.GetName() != name {
		return apierrors.NewBadRequest(fmt.Sprintf("metadata.name %q in the body does not match %q in the URL", m.GetName(), name))
	}
	return nil
}

// run applies the action to the stored object. A body's metadata.uid is a
// precondition, as a delete's is: whoever confirmed the action on one
// object must not act on another made since under its name.
func (r *ActionREST[T]) run(ctx context.Context, name string, body runtime.Object, dryRun []string, fieldManager string) (runtime.Object, error) {
	var uid types.UID
	if m, err := meta.Accessor(body); err == nil {
		uid = m.GetUID()
	}
	apply := func(ctx context.Context, _, old runtime.Object) (runtime.Object, error) {
		obj := old.DeepCopyObject().(T)
		if uid != "" && obj.GetUID() != uid {
			return nil, apierrors.NewConflict(r.store.DefaultQualifiedResource, name,
				fmt.Errorf("metadata.uid %s in the body is not the stored object's, %s: it was deleted and made again since; look at it again", uid, obj.GetUID()))
		}
		if err := r.authorize(ctx, obj); err != nil {
			return nil, err
		}
		if err := r.action.Apply(ctx, obj, body); err != nil {
			return nil, err
		}
		return obj, nil
	}
	out, _, err := r.store.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil, apply), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc,
		false, &metav1.UpdateOptions{DryRun: dryRun, FieldManager: fieldManager})
	if err != nil {
		return nil, err
	}
	if r.action.Event != nil && !dryrun.IsDryRun(dryRun) {
		obj := out.(T)
		e := r.action.Event(ctx, obj, body)
		events.Record(r.recorder, reference(r.kind, obj), nil, e.Reason, r.action.Name, "%s", e.Message)
	}
	return out, nil
}

// authorize asks the action's custom verb for obj, the stored object the
// update is about to change.
func (r *ActionREST[T]) authorize(ctx context.Context, obj T) error {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return apierrors.NewForbidden(r.store.DefaultQualifiedResource, obj.GetName(), errors.New("the request names no user"))
	}
	info, _ := genericapirequest.RequestInfoFrom(ctx)
	version := r.kind.Version
	if info != nil && info.APIVersion != "" {
		version = info.APIVersion
	}
	on := ""
	if r.action.VerbOn != nil {
		on = r.action.VerbOn(obj)
	}
	decision, reason, err := r.authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: r.action.Verb, Namespace: obj.GetNamespace(), APIGroup: r.kind.Group, APIVersion: version,
		Resource: r.store.DefaultQualifiedResource.Resource, Subresource: on, Name: obj.GetName(), ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return nil
	}
	resource := r.store.DefaultQualifiedResource.Resource
	msg := fmt.Sprintf("user %q cannot use %s/%s on %q: it needs the %q verb on resource %q",
		u.GetName(), resource, r.action.Name, obj.GetName(), r.action.Verb, resource)
	if on != "" {
		msg += fmt.Sprintf(", subresource %q", on)
	}
	msg = authz.Denied(msg, reason, err)
	return apierrors.NewForbidden(r.store.DefaultQualifiedResource, obj.GetName(), errors.New(msg))
}

// ReplaceActionREST serves an Action as PUT.
type ReplaceActionREST[T Object] struct {
	action *ActionREST[T]
}

var _ rest.Updater = &ReplaceActionREST[Object]{}

// New returns an empty request body.
func (r *ReplaceActionREST[T]) New() runtime.Object { return r.action.New() }

// Destroy does nothing: the main endpoint owns the storage.
func (r *ReplaceActionREST[T]) Destroy() {}

// Update runs the action with the request body. Admission sees the body,
// against an empty body of the same kind as the old object: the action never
// shows the stored object to admission as an old version of the body.
func (r *ReplaceActionREST[T]) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, _ rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	empty := r.action.action.NewBody()
	if m, err := meta.Accessor(empty); err == nil {
		m.SetName(name)
	}
	body, err := objInfo.UpdatedObject(ctx, empty)
	if err != nil {
		return nil, false, err
	}
	if err := checkBodyName(body, name); err != nil {
		return nil, false, err
	}
	if updateValidation != nil {
		if err := updateValidation(ctx, body.DeepCopyObject(), empty); err != nil {
			return nil, false, err
		}
	}
	out, err := r.action.run(ctx, name, body, options.DryRun, options.FieldManager)
	return out, false, err
}

// reference names obj in an Event by its served version: the registry holds
// internal objects, whose own kind names no version a client knows.
func reference[T Object](kind schema.GroupVersionKind, obj T) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: kind.GroupVersion().String(), Kind: kind.Kind,
		Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
	}
}

// actionStrategy is the update strategy of an Action: the action's Apply
// owns status (including what /status may not write, like an approval or an
// override); spec and the user-owned metadata stay as stored.
type actionStrategy[T Object] struct {
	*strategy[T]
}

func (s actionStrategy[T]) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	specOf(obj).Set(specOf(old))
	keepUserMetadata(obj.(T), old.(T))
}

func (s actionStrategy[T]) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return s.def.ValidateStatusUpdate(obj.(T), old.(T))
}
