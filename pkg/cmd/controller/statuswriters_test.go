package controller

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/configstatus"
	"ichor.dev/ichor/pkg/controller/backup"
	"ichor.dev/ichor/pkg/controller/bootstraptoken"
	"ichor.dev/ichor/pkg/controller/clustersecrets"
	"ichor.dev/ichor/pkg/controller/configpatch"
	"ichor.dev/ichor/pkg/controller/kubeletserving"
	"ichor.dev/ichor/pkg/controller/operation"
	"ichor.dev/ichor/pkg/controller/taloscluster"
	"ichor.dev/ichor/pkg/disruption"
	"ichor.dev/ichor/pkg/intake"
)

// TestStatusFieldManagersHaveRows: every field manager under which
// ichor-controller writes a kind's status has its row of the table of
// status writers (v1alpha1, statuswriters.go), and every row is a writer's.
func TestStatusFieldManagersHaveRows(t *testing.T) {
	machine, cluster, patch := &v1alpha1.TalosMachine{}, &v1alpha1.TalosCluster{}, &v1alpha1.TalosConfigPatch{}
	writers := []struct {
		obj     runtime.Object
		manager string
	}{
		{machine, intake.FieldManager},
		{machine, configstatus.FieldManager},
		{machine, kubeletserving.FieldManager},
		{machine, operation.FieldManager},
		{cluster, taloscluster.FieldManager},
		{cluster, bootstraptoken.FieldManager},
		{cluster, clustersecrets.FieldManager},
		{cluster, bundlestore.DigestFieldManager},
		{cluster, kubeletserving.FieldManager},
		{cluster, disruption.FieldManager},
		{cluster, backup.FieldManager},
		{cluster, operation.CARotationFieldManager},
		{cluster, operation.DiskKeyRotationFieldManager},
		{cluster, operation.KubernetesKeysFieldManager},
		{patch, configpatch.FieldManager},
	}
	for _, obj := range []runtime.Object{machine, cluster, patch} {
		rows := v1alpha1.StatusFieldManagers(obj)
		var named []string
		for _, w := range writers {
			if w.obj == obj {
				named = append(named, w.manager)
				if !slices.Contains(rows, w.manager) {
					t.Errorf("%T: %s writes its status without a row of the table", obj, w.manager)
				}
			}
		}
		for _, m := range rows {
			if !slices.Contains(named, m) {
				t.Errorf("%T: the table's row of %s is no writer's here: add the writer to this test, or drop the row", obj, m)
			}
		}
	}
}
