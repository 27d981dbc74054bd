package resource

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"ichor.dev/ichor/pkg/events"
)

// Category groups every ichor.dev kind, so `kubectl get ichor` lists them all.
const Category = "ichor"

// REST is a kind's main endpoint.
type REST struct {
	*genericregistry.Store
	shortNames []string
	// decorate is the store's Decorator, which the generic store leaves off
	// the objects a DELETE returns when the deletion is not immediate
	// (finalizers, foreground propagation, a dry run); Delete and
	// DeleteCollection apply it to those too.
	decorate func(runtime.Object)
}

// Delete deletes the object and returns what the store returns, decorated.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	out, immediate, err := r.Store.Delete(ctx, name, deleteValidation, options)
	if r.decorate != nil && out != nil {
		r.decorate(out)
	}
	return out, immediate, err
}

// DeleteCollection deletes the objects a list selects and returns them, decorated.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	out, err := r.Store.DeleteCollection(ctx, deleteValidation, options, listOptions)
	if r.decorate != nil && out != nil {
		r.decorate(out)
	}
	return out, err
}

var (
	_ rest.ShortNamesProvider = &REST{}
	_ rest.CategoriesProvider = &REST{}
)

// ShortNames are the abbreviations kubectl accepts for the resource.
func (r *REST) ShortNames() []string { return r.shortNames }

// Categories puts the resource in the "ichor" category.
func (r *REST) Categories() []string { return []string{Category} }

// PartREST is an endpoint that reads the whole object and writes only a part
// of it: /status, and every Subresource of a definition.
type PartREST struct {
	store *genericregistry.Store
}

var (
	_ rest.Getter              = &PartREST{}
	_ rest.Updater             = &PartREST{}
	_ rest.ResetFieldsStrategy = &PartREST{}
	_ rest.TableConvertor      = &PartREST{}
)

// New returns an empty object of the kind.
func (r *PartREST) New() runtime.Object { return r.store.New() }

// Destroy does nothing: the main endpoint owns the storage.
func (r *PartREST) Destroy() {}

// Get returns the whole object.
func (r *PartREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes the endpoint's part of the object.
func (r *PartREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Subresources never create.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields says which fields a write through the endpoint leaves alone.
func (r *PartREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable renders the object as the main endpoint does.
func (r *PartREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// Storage is the REST storage of one kind.
type Storage struct {
	// Store is the main endpoint, kept so subresources can share its storage.
	Store  *REST
	Status *PartREST
	// Subresources are the definition's Subresources by name.
	Subresources map[string]*PartREST
	// Actions are the definition's Actions by name.
	Actions map[string]rest.Storage
}

// Deps are what a kind's storage needs beyond etcd.
type Deps struct {
	// Recorder records the Events of actions; nil records none.
	Recorder events.EventRecorder
	// Authorizer decides the custom verbs of actions (Action.Verb); a kind
	// with such an action cannot be built without one.
	Authorizer authorizer.Authorizer
}

// NewStorage builds the stores of a kind. storageVersion is the version objects
// are written in; SSA's reset fields are stated in it, and Events name objects
// in it.
func NewStorage[T Object](def *Definition[T], scheme *runtime.Scheme, storageVersion schema.GroupVersion, optsGetter generic.RESTOptionsGetter, deps Deps) (*Storage, error) {
	def.check()
	for _, a := range def.Actions {
		if a.Verb != "" && deps.Authorizer == nil {
			return nil, fmt.Errorf("resource %s: action %s checks the %s verb and needs an authorizer", def.Resource, a.Name, a.Verb)
		}
	}
	s := &strategy[T]{
		ObjectTyper:   scheme,
		NameGenerator: names.SimpleNameGenerator,
		def:           def,
		apiVersion:    fieldpath.APIVersion(storageVersion.String()),
	}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return def.New() },
		NewListFunc:               def.NewList,
		DefaultQualifiedResource:  def.Resource,
		SingularQualifiedResource: schema.GroupResource{Group: def.Resource.Group, Resource: def.Singular},
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor:            newTableConvertor(def),
	}
	if def.Decorate != nil {
		// Watch events from the watch cache share one object among all
		// watchers, which a decorator must not change; this kind is served
		// from etcd, where every watcher decodes its own.
		optsGetter = uncached{optsGetter}
		// Objects of the kind are decorated wherever they appear; anything
		// else (the Status an immediate DELETE answers) carries none.
		store.Decorator = func(obj runtime.Object) {
			if meta.IsListType(obj) {
				_ = meta.EachListItem(obj, func(item runtime.Object) error {
					if o, ok := item.(T); ok {
						def.Decorate(o)
					}
					return nil
				})
				return
			}
			if o, ok := obj.(T); ok {
				def.Decorate(o)
			}
		}
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: def.attrs}); err != nil {
		return nil, err
	}

	statusStore := *store
	status := statusStrategy[T]{s}
	statusStore.UpdateStrategy = status
	statusStore.ResetFieldsStrategy = status

	storage := &Storage{
		Store:        &REST{Store: store, shortNames: def.ShortNames, decorate: store.Decorator},
		Status:       &PartREST{store: &statusStore},
		Subresources: map[string]*PartREST{},
		Actions:      map[string]rest.Storage{},
	}
	for _, sub := range def.Subresources {
		subStore := *store
		strategy := subresourceStrategy[T]{s, sub}
		subStore.UpdateStrategy = strategy
		subStore.ResetFieldsStrategy = strategy
		storage.Subresources[sub.Name] = &PartREST{store: &subStore}
	}
	if len(def.Actions) > 0 {
		kinds, _, err := scheme.ObjectKinds(def.New())
		if err != nil {
			return nil, fmt.Errorf("resource %s: %w", def.Resource, err)
		}
		kind := storageVersion.WithKind(kinds[0].Kind)
		for _, action := range def.Actions {
			actionStore := *store
			actionStore.UpdateStrategy = actionStrategy[T]{s}
			a := &ActionREST[T]{store: &actionStore, action: action, kind: kind, recorder: deps.Recorder, authorizer: deps.Authorizer}
			if action.Replace {
				storage.Actions[action.Name] = &ReplaceActionREST[T]{action: a}
			} else {
				storage.Actions[action.Name] = a
			}
		}
	}
	return storage, nil
}

// uncached serves a kind without the watch cache.
type uncached struct{ generic.RESTOptionsGetter }

func (u uncached) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := u.RESTOptionsGetter.GetRESTOptions(resource, example)
	opts.Decorator = generic.UndecoratedStorage
	return opts, err
}
