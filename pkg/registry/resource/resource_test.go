package resource_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/apiserver"
	"ichor.dev/ichor/pkg/registry/ichor/ichorinstallation"
	"ichor.dev/ichor/pkg/registry/ichor/ichoruser"
	"ichor.dev/ichor/pkg/registry/ichor/machinereclaim"
	"ichor.dev/ichor/pkg/registry/ichor/talosbackup"
	"ichor.dev/ichor/pkg/registry/ichor/taloscluster"
	"ichor.dev/ichor/pkg/registry/ichor/talosconfigpatch"
	"ichor.dev/ichor/pkg/registry/ichor/taloscredentialrequest"
	"ichor.dev/ichor/pkg/registry/ichor/talosmachine"
	"ichor.dev/ichor/pkg/registry/ichor/talosoperation"
	"ichor.dev/ichor/pkg/registry/resource"
)

// kindChecks runs the same checks against every kind's definition.
type kindCheck struct {
	kind       string
	fields     func(runtime.Object) (map[string]string, error)
	newObj     func() runtime.Object
	table      func() (int, int)
	namespaced bool
}

func check[T resource.Object](def *resource.Definition[T], namespaced bool) kindCheck {
	return kindCheck{
		kind:       reflect.TypeOf(def.New()).Elem().Name(),
		fields:     func(o runtime.Object) (map[string]string, error) { return resource.Attrs(def, o) },
		newObj:     func() runtime.Object { return def.New() },
		table:      func() (int, int) { return len(def.Columns), len(def.Cells(def.New())) },
		namespaced: namespaced,
	}
}

var kinds = []kindCheck{
	check(taloscluster.Definition, true),
	check(talosmachine.Definition, true),
	check(talosconfigpatch.Definition, true),
	check(talosoperation.Definition, true),
	check(taloscredentialrequest.Definition, true),
	check(machinereclaim.Definition, true),
	check(talosbackup.Definition, true),
	check(ichoruser.Definition, false),
	check(ichorinstallation.Definition, false),
}

// The registry must serve exactly the field labels the versioned API accepts,
// or a selector would be accepted and then match nothing (or be refused).
func TestSelectableFieldsMatchTheVersionedAPI(t *testing.T) {
	if len(kinds) != len(v1alpha1.SelectableFields) {
		t.Fatalf("%d kinds checked, v1alpha1 declares %d", len(kinds), len(v1alpha1.SelectableFields))
	}
	for _, k := range kinds {
		t.Run(k.kind, func(t *testing.T) {
			got, err := k.fields(k.newObj())
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"metadata.name"}
			if k.namespaced {
				want = append(want, "metadata.namespace")
			}
			want = append(want, v1alpha1.SelectableFields[k.kind]...)
			var keys []string
			for key := range got {
				keys = append(keys, key)
			}
			sort.Strings(keys)
			sort.Strings(want)
			if !reflect.DeepEqual(keys, want) {
				t.Errorf("registry serves %v, versioned API accepts %v", keys, want)
			}
			// Every label the versioned API accepts converts; others are refused.
			for _, label := range want {
				if _, _, err := apiserver.Scheme.ConvertFieldLabel(v1alpha1.SchemeGroupVersion.WithKind(k.kind), label, "x"); err != nil {
					t.Errorf("label %s: %v", label, err)
				}
			}
			if _, _, err := apiserver.Scheme.ConvertFieldLabel(v1alpha1.SchemeGroupVersion.WithKind(k.kind), "spec.nope", "x"); err == nil {
				t.Error("an unknown field label was accepted")
			}
		})
	}
}

func TestTableCellsMatchColumns(t *testing.T) {
	for _, k := range kinds {
		columns, cells := k.table()
		if columns != cells {
			t.Errorf("%s: %d columns but %d cells", k.kind, columns, cells)
		}
	}
}

func TestMainEndpointOwnsSpecAndStatusEndpointOwnsStatus(t *testing.T) {
	mainStrategy, statusStrategy := resource.Strategies(talosoperation.Definition, apiserver.Scheme, v1alpha1.SchemeGroupVersion)
	ctx := context.Background()

	op := &ichor.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "ns", Generation: 7},
		Spec:       ichor.TalosOperationSpec{ClusterName: "c", Type: ichor.OperationReboot},
		Status:     ichor.TalosOperationStatus{Phase: ichor.OperationSucceeded, StartedBy: "mallory"},
	}
	mainStrategy.PrepareForCreate(ctx, op)
	if op.Generation != 1 || op.Status.StartedBy != "" || op.Status.Phase != ichor.OperationPending {
		t.Fatalf("create kept a client's status or generation: generation %d, status %+v", op.Generation, op.Status)
	}

	old := op.DeepCopy()
	old.Status.Phase = ichor.OperationRunning
	updated := old.DeepCopy()
	updated.Status.Phase = ichor.OperationFailed
	mainStrategy.PrepareForUpdate(ctx, updated, old)
	if updated.Status.Phase != ichor.OperationRunning {
		t.Errorf("main endpoint changed status to %s", updated.Status.Phase)
	}
	if updated.Generation != old.Generation {
		t.Errorf("generation moved without a spec change: %d → %d", old.Generation, updated.Generation)
	}
	updated.Spec.Machines = []string{"m1"}
	mainStrategy.PrepareForUpdate(ctx, updated, old)
	if updated.Generation != old.Generation+1 {
		t.Errorf("spec change: generation %d, want %d", updated.Generation, old.Generation+1)
	}

	statusUpdate := old.DeepCopy()
	statusUpdate.Spec.ClusterName = "other"
	statusUpdate.Labels = map[string]string{"sneaked": "in"}
	statusUpdate.Status.Phase = ichor.OperationSucceeded
	statusStrategy.PrepareForUpdate(ctx, statusUpdate, old)
	if statusUpdate.Spec.ClusterName != "c" || statusUpdate.Labels != nil {
		t.Errorf("status endpoint changed spec or labels: %+v %v", statusUpdate.Spec, statusUpdate.Labels)
	}
	if statusUpdate.Status.Phase != ichor.OperationSucceeded {
		t.Errorf("status endpoint dropped the status change")
	}

	// Each endpoint tells server-side apply which fields it leaves alone.
	gv := "ichor.dev/v1alpha1"
	if s := mainStrategy.GetResetFields()[fieldpathVersion(gv)]; s == nil || !s.Has(pathOf("status")) {
		t.Error("main endpoint does not reset status")
	}
	if s := statusStrategy.GetResetFields()[fieldpathVersion(gv)]; s == nil || !s.Has(pathOf("spec")) {
		t.Error("status endpoint does not reset spec")
	}
}

func TestCredentialRequestRequesterComesFromTheRequest(t *testing.T) {
	mainStrategy, _ := resource.Strategies(taloscredentialrequest.Definition, apiserver.Scheme, v1alpha1.SchemeGroupVersion)
	req := &ichor.TalosCredentialRequest{Spec: ichor.TalosCredentialRequestSpec{Username: "admin", Groups: []string{"system:masters"}}}
	mainStrategy.PrepareForCreate(withUser(context.Background(), "alice", "ichor:operator"), req)
	if req.Spec.Username != "alice" || !reflect.DeepEqual(req.Spec.Groups, []string{"ichor:operator"}) {
		t.Errorf("requester = %q %v, want alice [ichor:operator]", req.Spec.Username, req.Spec.Groups)
	}
	// An update (a re-applied manifest, say) cannot change who asked.
	forged := req.DeepCopy()
	forged.Spec.Username, forged.Spec.Groups = "mallory", []string{"system:masters"}
	mainStrategy.PrepareForUpdate(context.Background(), forged, req)
	if forged.Spec.Username != "alice" || !reflect.DeepEqual(forged.Spec.Groups, []string{"ichor:operator"}) {
		t.Errorf("update changed the requester to %q %v", forged.Spec.Username, forged.Spec.Groups)
	}
	reset := mainStrategy.GetResetFields()[fieldpathVersion("ichor.dev/v1alpha1")]
	for _, f := range []string{"username", "uid", "groups"} {
		if !reset.Has(fieldpath.MakePathOrDie("spec", f)) {
			t.Errorf("server-side apply does not leave spec.%s to the server", f)
		}
	}

	anonymous := &ichor.TalosCredentialRequest{Spec: ichor.TalosCredentialRequestSpec{Username: "admin"}}
	mainStrategy.PrepareForCreate(context.Background(), anonymous)
	errs := mainStrategy.Validate(context.Background(), anonymous)
	if anonymous.Spec.Username != "" || !hasError(errs, "spec.username") {
		t.Errorf("a request without a user kept %q and validated with %v", anonymous.Spec.Username, errs)
	}
}

func hasError(errs field.ErrorList, path string) bool {
	for _, e := range errs {
		if e.Field == path {
			return true
		}
	}
	return false
}

// TestAnActionWithoutItsVerbDoesNotBuild: every action asks a custom verb of
// its own, so RBAC can grant exactly it; a definition whose action has none
// fails when its storage is built, before the server serves anything.
func TestAnActionWithoutItsVerbDoesNotBuild(t *testing.T) {
	def := *machinereclaim.Definition
	def.Actions = slices.Clone(def.Actions)
	def.Actions[0].Verb = ""
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "custom verb of action reclaim") {
			t.Errorf("building a definition whose action has no verb: %v", r)
		}
	}()
	resource.Strategies(&def, apiserver.Scheme, v1alpha1.SchemeGroupVersion)
}
