package statusapplytest

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
)

// TestObjectsSetEveryField: the objects writers are handed have every
// status field set, so that a writer leaving one of its row out is seen.
func TestObjectsSetEveryField(t *testing.T) {
	for _, status := range []any{Machine().Status, Cluster().Status, Patch().Status} {
		v := reflect.ValueOf(status)
		for i := range v.NumField() {
			if v.Field(i).IsZero() {
				t.Errorf("%s.%s is not set: set it in objects.go", v.Type().Name(), v.Type().Field(i).Name)
			}
		}
	}
}

// fakeT records what a check reports instead of failing the test.
type fakeT struct {
	testing.TB
	errs []string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}
func (f *fakeT) Fatal(args ...any) {
	f.errs = append(f.errs, fmt.Sprint(args...))
	runtime.Goexit()
}

// check runs CheckOwned on what apply applies, and returns its complaints.
func check(t *testing.T, whole bool, apply func(client.Client) error) []string {
	c, rec := Client(t, Cluster())
	if err := apply(c); err != nil {
		t.Fatal(err)
	}
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rec.CheckOwned(f, whole)
	}()
	<-done
	return f.errs
}

// TestCheckOwned: an apply within its row passes; one outside it, short
// of it, or under a field manager without a row, does not.
func TestCheckOwned(t *testing.T) {
	cond := func(t string) *metav1ac.ConditionApplyConfiguration {
		return metav1ac.Condition().WithType(t).WithStatus(metav1.ConditionTrue).WithReason("Set").WithMessage("m").WithLastTransitionTime(at)
	}
	apply := func(manager string, st *ichorac.TalosClusterStatusApplyConfiguration) func(client.Client) error {
		return func(c client.Client) error {
			return c.Status().Apply(context.Background(), ichorac.TalosCluster("demo", Namespace).WithStatus(st),
				client.FieldOwner(manager), client.ForceOwnership)
		}
	}
	for _, c := range []struct {
		what  string
		whole bool
		apply func(client.Client) error
		want  string
	}{
		{"its row", true, apply(v1alpha1.FieldManagerBackup,
			ichorac.TalosClusterStatus().WithBackup(ichorac.ClusterBackupStatus().WithLastSuccessfulBackup("b")).
				WithConditions(cond(v1alpha1.ClusterConditionBackupSucceeded))), ""},
		{"another's condition", false, apply(v1alpha1.FieldManagerBackup,
			ichorac.TalosClusterStatus().WithConditions(cond(v1alpha1.ClusterConditionReady))), "writes condition Ready, outside its row"},
		{"another's field", false, apply(v1alpha1.FieldManagerClusterSecrets,
			ichorac.TalosClusterStatus().WithPhase(v1alpha1.ClusterPhaseReady)), "writes status.phase, outside its row"},
		{"short of its row", true, apply(v1alpha1.FieldManagerBackup,
			ichorac.TalosClusterStatus().WithBackup(ichorac.ClusterBackupStatus().WithLastSuccessfulBackup("b"))), "did not apply condition BackupSucceeded"},
		{"no row", false, apply("ichor-nobody", ichorac.TalosClusterStatus().WithPhase(v1alpha1.ClusterPhaseReady)), "has no row"},
		{"nothing applied", false, func(client.Client) error { return nil }, "no status was applied"},
	} {
		errs := check(t, c.whole, c.apply)
		switch {
		case c.want == "" && len(errs) > 0:
			t.Errorf("%s: %v", c.what, errs)
		case c.want != "" && (len(errs) != 1 || !strings.Contains(errs[0], c.want)):
			t.Errorf("%s: %v, want one complaint with %q", c.what, errs, c.want)
		}
	}
}

// TestTrespasses: managedFields within the rows pass, an inherited
// condition included; a field or condition outside a row, and an ichor-…
// apply without a row, are named; others' entries are not looked at.
func TestTrespasses(t *testing.T) {
	entry := func(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: "status",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	m := Machine()
	m.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:address":{}}}`)}},
		entry(v1alpha1.FieldManagerIntake, metav1.ManagedFieldsOperationApply,
			`{"f:status":{"f:phase":{},"f:hardware":{".":{},"f:uuid":{}},"f:conditions":{"k:{\"type\":\"Reachable\"}":{".":{},"f:type":{}}}}}`),
		entry(v1alpha1.FieldManagerMachineConfig, metav1.ManagedFieldsOperationApply,
			`{"f:status":{"f:appliedConfig":{},"f:conditions":{"k:{\"type\":\"Reachable\"}":{"f:reason":{}},"k:{\"type\":\"Ready\"}":{}}}}`),
		entry("cluster.test", metav1.ManagedFieldsOperationUpdate, `{"f:status":{"f:nodeName":{}}}`),
	}
	if got := Trespasses(m); len(got) != 0 {
		t.Errorf("within the rows: %v", got)
	}
	m.ManagedFields = append(m.ManagedFields,
		entry(v1alpha1.FieldManagerIntake, metav1.ManagedFieldsOperationApply,
			`{"f:status":{"f:nodeName":{},"f:conditions":{"k:{\"type\":\"Ready\"}":{}}}}`),
		entry("ichor-nobody", metav1.ManagedFieldsOperationApply, `{"f:status":{"f:phase":{}}}`))
	got := strings.Join(Trespasses(m), "\n")
	for _, want := range []string{"ichor-intake writes status.nodeName", "ichor-intake writes condition Ready", "ichor-nobody applies status without a row"} {
		if !strings.Contains(got, want) {
			t.Errorf("trespasses %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "cluster.test") {
		t.Errorf("a manager outside the table was judged: %s", got)
	}
}
