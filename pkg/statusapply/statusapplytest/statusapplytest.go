// Package statusapplytest holds status writers to their rows of the table
// of status writers (v1alpha1, statuswriters.go). A writer's unit test
// hands it an object whose status has every field set (Machine, Cluster,
// Patch) through a client that records what it applies (Client), then
// checks that it applied exactly its row (Recorder.CheckOwned). Integration
// tests read what the API server says each field manager owns
// (Trespasses).
package statusapplytest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/clusterindex"
)

// Apply is one server-side apply of status: who applied what.
type Apply struct {
	// Kind and Name are the object's.
	Kind, Name string
	// Manager is the field manager it was applied under.
	Manager string
	// Fields are the status fields it sets, by JSON name, conditions aside;
	// Conditions, the types of the conditions it sets.
	Fields, Conditions []string
}

// Recorder records the status applies made through a Client.
type Recorder struct {
	mu      sync.Mutex
	applies []Apply
}

// Applies are the applies recorded, in order.
func (r *Recorder) Applies() []Apply {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.applies)
}

// Client is a fake client of objs, indexed by cluster as the controller's
// cache is, that records every server-side apply of
// status made through it, and applies none.
func Client(t testing.TB, objs ...client.Object) (client.Client, *Recorder) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	r := &Recorder{}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...)
	for _, obj := range clusterindex.Indexed() {
		b = b.WithIndex(obj, clusterindex.Field, func(o client.Object) []string { return []string{clusterindex.ClusterOf(o)} })
	}
	c := b.
		WithStatusSubresource(&v1alpha1.TalosMachine{}, &v1alpha1.TalosCluster{}, &v1alpha1.TalosConfigPatch{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceApply: func(_ context.Context, _ client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
				if sub != "status" {
					return fmt.Errorf("statusapplytest: an apply of subresource %s", sub)
				}
				a, err := parse(obj, opts)
				if err != nil {
					return err
				}
				r.mu.Lock()
				defer r.mu.Unlock()
				r.applies = append(r.applies, a)
				return nil
			},
		}).Build()
	return c, r
}

// parse reads what an apply configuration of status sets.
func parse(obj runtime.ApplyConfiguration, opts []client.SubResourceApplyOption) (Apply, error) {
	var o client.SubResourceApplyOptions
	o.ApplyOpts(opts)
	manager := o.FieldManager
	raw, err := json.Marshal(obj)
	if err != nil {
		return Apply{}, err
	}
	var doc struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Status map[string]json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return Apply{}, err
	}
	a := Apply{Kind: doc.Kind, Name: doc.Metadata.Name, Manager: manager}
	for f, v := range doc.Status {
		if f != "conditions" {
			a.Fields = append(a.Fields, f)
			continue
		}
		var conds []struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(v, &conds); err != nil {
			return Apply{}, err
		}
		for _, c := range conds {
			a.Conditions = append(a.Conditions, c.Type)
		}
	}
	slices.Sort(a.Fields)
	return a, nil
}

// CheckOwned fails t unless some apply was recorded and each wrote only
// what its field manager's row of the table owns. With whole (the writer
// was given a status with every field set) each must have written its
// whole row too, but for inherited conditions, which a writer writes only
// at times.
func (r *Recorder) CheckOwned(t testing.TB, whole bool) {
	t.Helper()
	applies := r.Applies()
	if len(applies) == 0 {
		t.Fatal("no status was applied")
	}
	for _, a := range applies {
		obj := prototype(a.Kind)
		if obj == nil {
			t.Errorf("%s %s: no status writers are on record for the kind", a.Kind, a.Name)
			continue
		}
		if !slices.Contains(v1alpha1.StatusFieldManagers(obj), a.Manager) {
			t.Errorf("%s %s: applied under %q, which has no row for %s in the table (v1alpha1, statuswriters.go)", a.Kind, a.Name, a.Manager, a.Kind)
			continue
		}
		for _, s := range stray(obj, a.Manager, a.Fields, a.Conditions) {
			t.Errorf("%s %s: %s", a.Kind, a.Name, s)
		}
		if !whole {
			continue
		}
		for _, f := range v1alpha1.OwnedStatusFields(obj, a.Manager) {
			if !slices.Contains(a.Fields, f) {
				t.Errorf("%s %s: %s did not apply status.%s of its row from a status with every field set", a.Kind, a.Name, a.Manager, f)
			}
		}
		for _, c := range v1alpha1.OwnedConditions(obj, a.Manager) {
			if !slices.Contains(a.Conditions, c) {
				t.Errorf("%s %s: %s did not apply condition %s of its row from a status with every condition set", a.Kind, a.Name, a.Manager, c)
			}
		}
	}
}

// stray says which of fields and conditions manager's row for obj's kind
// does not own.
func stray(obj runtime.Object, manager string, fields, conditions []string) []string {
	var out []string
	own := v1alpha1.OwnedStatusFields(obj, manager)
	for _, f := range fields {
		if !slices.Contains(own, f) {
			out = append(out, fmt.Sprintf("%s writes status.%s, outside its row of the table (v1alpha1, statuswriters.go)", manager, f))
		}
	}
	owned := append(v1alpha1.OwnedConditions(obj, manager), v1alpha1.InheritedConditions(obj, manager)...)
	for _, c := range conditions {
		if !slices.Contains(owned, c) {
			out = append(out, fmt.Sprintf("%s writes condition %s, outside its row of the table (v1alpha1, statuswriters.go)", manager, c))
		}
	}
	return out
}

// prototype is an object of the kind the table names, or nil.
func prototype(kind string) runtime.Object {
	switch kind {
	case "TalosMachine":
		return &v1alpha1.TalosMachine{}
	case "TalosCluster":
		return &v1alpha1.TalosCluster{}
	case "TalosConfigPatch":
		return &v1alpha1.TalosConfigPatch{}
	}
	return nil
}

// Trespasses reads obj's managedFields (a TalosMachine, TalosCluster or
// TalosConfigPatch as the API server returned it) and says where a field
// manager of the table owns a status field or condition outside its row,
// and which field manager named ichor-… applies status without a row.
// Managers outside the table (people, the API server's subresources, a
// process's default name) are not its business.
func Trespasses(obj client.Object) []string {
	kind := prototype(kindName(obj))
	if kind == nil {
		return []string{fmt.Sprintf("%T: no status writers are on record for the kind", obj)}
	}
	managers := v1alpha1.StatusFieldManagers(kind)
	var out []string
	for _, e := range obj.GetManagedFields() {
		if e.Subresource != "status" {
			continue
		}
		if !slices.Contains(managers, e.Manager) {
			if e.Operation == metav1.ManagedFieldsOperationApply && strings.HasPrefix(e.Manager, "ichor-") {
				out = append(out, fmt.Sprintf("%s applies status without a row of the table (v1alpha1, statuswriters.go)", e.Manager))
			}
			continue
		}
		fields, conditions, err := ownedStatus(e)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", e.Manager, err))
			continue
		}
		out = append(out, stray(kind, e.Manager, fields, conditions)...)
	}
	return out
}

// kindName is the kind of obj as the table names it.
func kindName(obj client.Object) string {
	switch obj.(type) {
	case *v1alpha1.TalosMachine:
		return "TalosMachine"
	case *v1alpha1.TalosCluster:
		return "TalosCluster"
	case *v1alpha1.TalosConfigPatch:
		return "TalosConfigPatch"
	}
	return ""
}

// ownedStatus reads a managedFields entry: the status fields and the
// condition types its manager owns.
func ownedStatus(e metav1.ManagedFieldsEntry) (fields, conditions []string, err error) {
	if e.FieldsV1 == nil {
		return nil, nil, nil
	}
	var set map[string]map[string]json.RawMessage
	if err := json.Unmarshal(e.FieldsV1.Raw, &set); err != nil {
		return nil, nil, fmt.Errorf("read its managed fields: %w", err)
	}
	for f, v := range set["f:status"] {
		name, ok := strings.CutPrefix(f, "f:")
		if !ok {
			continue // ".": the status itself
		}
		if name != "conditions" {
			fields = append(fields, name)
			continue
		}
		var items map[string]json.RawMessage
		if err := json.Unmarshal(v, &items); err != nil {
			return nil, nil, fmt.Errorf("read its conditions: %w", err)
		}
		for k := range items {
			key, ok := strings.CutPrefix(k, "k:")
			if !ok {
				continue
			}
			var c struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal([]byte(key), &c); err != nil {
				return nil, nil, fmt.Errorf("read condition key %s: %w", key, err)
			}
			conditions = append(conditions, c.Type)
		}
	}
	slices.Sort(fields)
	slices.Sort(conditions)
	return fields, conditions, nil
}
