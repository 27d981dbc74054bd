package itest

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
)

// ControllerClient is a controller-runtime client acting as ichor-controller.
func ControllerClient(t *testing.T) client.Client {
	t.Helper()
	scheme, err := ctrlcmd.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(CP.ConfigFor(ControllerUser, ControllerGroups...), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// CheckStatusOwners fails t when, as the API server's managedFields say,
// a field manager of the table of status writers (v1alpha1,
// statuswriters.go) owns a status field or condition outside its row on
// a TalosMachine, TalosCluster or TalosConfigPatch of namespace ns, or an
// ichor-… field manager without a row applied status. It needs a machine
// and a cluster to look at.
func CheckStatusOwners(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	c := ControllerClient(t)
	var machines v1alpha1.TalosMachineList
	var clusters v1alpha1.TalosClusterList
	var patches v1alpha1.TalosConfigPatchList
	var objs []client.Object
	for _, list := range []client.ObjectList{&machines, &clusters, &patches} {
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range machines.Items {
		objs = append(objs, &machines.Items[i])
	}
	for i := range clusters.Items {
		objs = append(objs, &clusters.Items[i])
	}
	for i := range patches.Items {
		objs = append(objs, &patches.Items[i])
	}
	if len(machines.Items) == 0 || len(clusters.Items) == 0 {
		t.Fatalf("namespace %s has %d machines and %d clusters: nothing to check the status writers on", ns, len(machines.Items), len(clusters.Items))
	}
	for _, obj := range objs {
		for _, s := range statusapplytest.Trespasses(obj) {
			t.Errorf("%T %s/%s: %s", obj, ns, obj.GetName(), s)
		}
	}
}
