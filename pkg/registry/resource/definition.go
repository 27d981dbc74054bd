// Package resource turns a short description of an ichor.dev kind into its
// REST storage: a genericregistry.Store for the main endpoint and a separate
// store for /status, with the strategies, field selectors and table columns
// every kind shares. Each kind's package under pkg/registry/ichor says only
// what is particular to it.
package resource

import (
	"context"
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Object is what every ichor.dev kind is: a runtime.Object with object
// metadata and, by convention, a Spec and a Status field.
type Object interface {
	runtime.Object
	metav1.Object
}

// Definition describes one kind to this package.
type Definition[T Object] struct {
	// Resource is the plural resource name qualified with the group.
	Resource schema.GroupResource
	// Singular is the singular resource name (talosmachine).
	Singular string
	// NamespaceScoped is true for kinds that live in a namespace.
	NamespaceScoped bool
	// ShortNames are the abbreviations kubectl accepts.
	ShortNames []string

	// New and NewList return empty internal objects.
	New     func() T
	NewList func() runtime.Object

	// PrepareForCreate, if set, runs after the status has been cleared on create,
	// to set what the server owns (an initial phase, the requester).
	PrepareForCreate func(ctx context.Context, obj T)

	// PrepareForUpdate, if set, runs on the main endpoint after the stored
	// status has been kept, to keep other server-owned fields as stored.
	PrepareForUpdate func(ctx context.Context, obj, old T)
	// ServerOwnedFields are spec fields, beyond status, that clients never
	// set: server-side apply leaves them alone on the main endpoint.
	ServerOwnedFields []fieldpath.Path

	// PrepareForStatusUpdate, if set, runs on /status after spec and user
	// metadata have been kept, to keep status fields that another subresource
	// owns (status.approval) as stored; StatusResetFields lists those fields
	// so that server-side apply on /status leaves them alone too.
	PrepareForStatusUpdate func(ctx context.Context, obj, old T)
	StatusResetFields      []fieldpath.Path

	// Subresources are the endpoints beyond /status that each write one part
	// of the object.
	Subresources []Subresource[T]
	// Actions are the kind's named-create endpoints (start, override, …).
	Actions []Action[T]
	// Decorate, when set, changes every object the storage returns, in
	// responses and in watch events: it removes what no read may return.
	Decorate func(obj T)

	// Validate, ValidateUpdate and ValidateStatusUpdate check the internal object.
	Validate             func(obj T) field.ErrorList
	ValidateUpdate       func(obj, old T) field.ErrorList
	ValidateStatusUpdate func(obj, old T) field.ErrorList

	// SelectableFields returns the values of the fields, beyond metadata.name
	// and metadata.namespace, that field selectors may name. Its keys must be
	// the field labels the versioned API accepts.
	SelectableFields func(obj T) fields.Set

	// Columns are the table columns between Name and Age, and Cells their
	// values for one object.
	Columns []metav1.TableColumnDefinition
	Cells   func(obj T) []any
}

// Subresource describes an endpoint that reads the whole object and writes
// one part of it, the way a CertificateSigningRequest's /approval writes only
// its conditions: its own RBAC resource path, its own strategy, and every
// other field kept as stored.
type Subresource[T Object] struct {
	// Name is the path element after the object's name (approval).
	Name string
	// PrepareForUpdate makes obj the stored object (old) with only the part
	// this endpoint owns taken from the request, and sets what the server
	// records with it (who, when). User metadata and the generation are kept
	// by the caller.
	PrepareForUpdate func(ctx context.Context, obj, old T)
	// ValidateUpdate checks the write.
	ValidateUpdate func(obj, old T) field.ErrorList
	// ResetFields are the fields server-side apply through this endpoint
	// leaves alone: everything but the owned part.
	ResetFields []fieldpath.Path
	// WritesFinalizers lets the endpoint write metadata.finalizers, which
	// every other part endpoint keeps as stored.
	WritesFinalizers bool
}

// Finalizers returns the Subresource "finalizers": it writes
// metadata.finalizers and nothing else, so a controller that only adds and
// removes its finalizer needs no right to write the spec. The generic
// store validates the metadata itself.
func Finalizers[T Object]() Subresource[T] {
	reset := []fieldpath.Path{fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("status")}
	for _, p := range userMetadataPaths() {
		if p.String() != ".metadata.finalizers" {
			reset = append(reset, p)
		}
	}
	return Subresource[T]{
		Name:             "finalizers",
		WritesFinalizers: true,
		PrepareForUpdate: func(_ context.Context, obj, old T) {
			specOf(obj).Set(specOf(old))
			statusOf(obj).Set(statusOf(old))
		},
		ValidateUpdate: func(T, T) field.ErrorList { return nil },
		ResetFields:    reset,
	}
}

// check panics when a definition cannot work, so a mistake fails at start-up
// and in every test rather than on the first request.
func (d *Definition[T]) check() {
	missing := func(what string) { panic(fmt.Sprintf("resource %s: definition lacks %s", d.Resource, what)) }
	switch {
	case d.Resource.Resource == "" || d.Singular == "":
		missing("resource names")
	case d.New == nil || d.NewList == nil:
		missing("New or NewList")
	case d.Validate == nil || d.ValidateUpdate == nil || d.ValidateStatusUpdate == nil:
		missing("validation")
	case d.Cells == nil:
		missing("table cells")
	}
	for _, sub := range d.Subresources {
		if sub.Name == "" || sub.Name == "status" || sub.PrepareForUpdate == nil || sub.ValidateUpdate == nil || len(sub.ResetFields) == 0 {
			missing("a complete subresource " + sub.Name)
		}
	}
	for _, a := range d.Actions {
		if a.Name == "" || a.NewBody == nil || a.Apply == nil {
			missing("a complete action " + a.Name)
		}
		if a.Verb == "" {
			missing("the custom verb of action " + a.Name + " (Action.Verb), which RBAC grants")
		}
	}
	t := reflect.TypeOf(d.New()).Elem()
	for _, f := range []string{"Spec", "Status"} {
		if _, ok := t.FieldByName(f); !ok {
			missing("a " + f + " field in " + t.Name())
		}
	}
}

// specOf and statusOf address an object's Spec and Status fields, which the
// strategies move between old and new objects to keep each endpoint to its half.
func specOf(obj runtime.Object) reflect.Value { return reflect.ValueOf(obj).Elem().FieldByName("Spec") }
func statusOf(obj runtime.Object) reflect.Value {
	return reflect.ValueOf(obj).Elem().FieldByName("Status")
}
