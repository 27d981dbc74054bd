package v1alpha1

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// statusKinds are the kinds the table covers, each with its status type
// and the prefix of its condition types' constants.
var statusKinds = []struct {
	obj    runtime.Object
	status any
	prefix string
}{
	{&TalosMachine{}, TalosMachineStatus{}, "MachineCondition"},
	{&TalosCluster{}, TalosClusterStatus{}, "ClusterCondition"},
	{&TalosConfigPatch{}, TalosConfigPatchStatus{}, "PatchCondition"},
}

// TestStatusWritersCoverEveryField: every field of each kind's status has
// a writer, and every field a row names is one.
func TestStatusWritersCoverEveryField(t *testing.T) {
	for _, k := range statusKinds {
		kind := kindOf(k.obj)
		fields := jsonFields(reflect.TypeOf(k.status))
		written := map[string]bool{}
		for _, w := range statusWriters {
			if w.Kind != kind {
				continue
			}
			for _, f := range w.Fields {
				if !slices.Contains(fields, f) || f == "conditions" {
					t.Errorf("%s, %q: %s is no status field of a %s", kind, w.FieldManager, f, kind)
				}
				written[f] = true
			}
		}
		for _, f := range fields {
			if f != "conditions" && !written[f] {
				t.Errorf("%s: status.%s has no writer in the table (statuswriters.go): add it to its writer's row", kind, f)
			}
		}
	}
}

// TestStatusWritersOwnEveryCondition: every condition type of each kind
// (its constants in the package's source) has exactly one owner, a field
// manager; an inherited type is another row's.
func TestStatusWritersOwnEveryCondition(t *testing.T) {
	_, values := readConstants(t, ".")
	for _, k := range statusKinds {
		kind := kindOf(k.obj)
		types := map[string]string{} // condition type: constant
		for name := range values {
			if strings.HasPrefix(name, k.prefix) {
				v, ok := resolve(values, name, 0)
				if !ok {
					t.Fatalf("cannot resolve %s", name)
				}
				types[v] = name
			}
		}
		if len(types) == 0 {
			t.Fatalf("%s: no %s* constant found", kind, k.prefix)
		}
		owners := map[string][]string{}
		for _, w := range statusWriters {
			if w.Kind != kind {
				continue
			}
			if w.FieldManager == "" && len(w.Conditions)+len(w.Inherited) > 0 {
				t.Errorf("%s: a row without a field manager owns conditions: %+v", kind, w)
			}
			for _, c := range w.Conditions {
				owners[c] = append(owners[c], w.FieldManager)
			}
		}
		for c, name := range types {
			if len(owners[c]) != 1 {
				t.Errorf("%s: condition %s (%s) has owners %v, want one", kind, c, name, owners[c])
			}
		}
		for c, by := range owners {
			if _, ok := types[c]; !ok {
				t.Errorf("%s: %v own %q, which is no %s* constant", kind, by, c, k.prefix)
			}
		}
		for _, w := range statusWriters {
			for _, c := range w.Inherited {
				if w.Kind == kind && (len(owners[c]) != 1 || owners[c][0] == w.FieldManager) {
					t.Errorf("%s: %s inherits %s, which must be another row's own", kind, w.FieldManager, c)
				}
			}
		}
	}
}

// TestStatusFieldManagers: every FieldManager constant has a row, field
// managers are ichor-controller's (ichor-…), and no kind has two rows of
// one.
func TestStatusFieldManagers(t *testing.T) {
	_, values := readConstants(t, ".")
	used := map[string]bool{}
	for _, k := range statusKinds {
		managers := StatusFieldManagers(k.obj)
		for i, m := range managers {
			used[m] = true
			if !strings.HasPrefix(m, "ichor-") {
				t.Errorf("%s: field manager %q is not named ichor-…", kindOf(k.obj), m)
			}
			if slices.Contains(managers[:i], m) {
				t.Errorf("%s: %s has two rows", kindOf(k.obj), m)
			}
		}
	}
	for name := range values {
		if !strings.HasPrefix(name, "FieldManager") {
			continue
		}
		if v, _ := resolve(values, name, 0); !used[v] {
			t.Errorf("%s (%q) writes no status in the table", name, v)
		}
	}
}

// TestStatusLookups: the lookups give a writer its row, and a writer
// without one is refused.
func TestStatusLookups(t *testing.T) {
	m := &TalosMachine{}
	if got := OwnedConditions(m, FieldManagerMachineConfig); !slices.Equal(got, []string{MachineConditionConfigApplied, MachineConditionReady}) {
		t.Errorf("OwnedConditions(machine, %s) = %v", FieldManagerMachineConfig, got)
	}
	if got := InheritedConditions(m, FieldManagerMachineConfig); !slices.Contains(got, MachineConditionReachable) {
		t.Errorf("InheritedConditions(machine, %s) = %v", FieldManagerMachineConfig, got)
	}
	if got := OwnedStatusFields(&TalosCluster{}, FieldManagerSecretsDigest); !slices.Equal(got, []string{"secretsDigest"}) {
		t.Errorf("OwnedStatusFields(cluster, %s) = %v", FieldManagerSecretsDigest, got)
	}
	for _, manager := range []string{"", "ichor-nobody", FieldManagerIntake} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%q has a row for TalosCluster", manager)
				}
			}()
			OwnedConditions(&TalosCluster{}, manager)
		}()
	}
}

// jsonFields are the JSON names of the fields of struct type t.
func jsonFields(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}
