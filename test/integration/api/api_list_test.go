package api

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

func TestAPILabelAndFieldSelectors(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	ichor := itest.APIClient(t).IchorV1alpha1()
	machines := ichor.TalosMachines(ns)

	for _, m := range []struct{ name, cluster, tier string }{
		{"a-1", "alpha", "gold"}, {"a-2", "alpha", "silver"}, {"b-1", "beta", "gold"}, {"free", "", "silver"},
	} {
		obj := itest.APITalosMachine(m.name, ns, m.cluster)
		obj.Labels = map[string]string{"tier": m.tier}
		if _, err := machines.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", m.name, err)
		}
	}
	// a-2 becomes Ready; status.phase is selectable.
	a2, err := machines.Get(ctx, "a-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a2.Status.Phase = v1alpha1.MachinePhaseReady
	if _, err := machines.UpdateStatus(ctx, a2, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status: %v", err)
	}

	machineCases := []struct {
		labels, fields string
		want           []string
	}{
		{"tier=gold", "", []string{"a-1", "b-1"}},
		{"tier in (silver)", "", []string{"a-2", "free"}},
		{"", "spec.clusterName=alpha", []string{"a-1", "a-2"}},
		{"", "spec.clusterName!=alpha", []string{"b-1", "free"}},
		{"", "spec.clusterName=", []string{"free"}},
		{"", "spec.role=worker", []string{"a-1", "a-2", "b-1"}},
		{"", "status.phase=Ready", []string{"a-2"}},
		{"", "status.phase=", []string{"a-1", "b-1", "free"}},
		{"", "metadata.name=b-1", []string{"b-1"}},
		{"tier=gold", "spec.clusterName=alpha", []string{"a-1"}},
		{"tier=silver", "spec.clusterName=alpha,status.phase=Ready", []string{"a-2"}},
		{"tier=bronze", "", []string{}},
	}
	for _, c := range machineCases {
		list, err := machines.List(ctx, metav1.ListOptions{LabelSelector: c.labels, FieldSelector: c.fields})
		if err != nil {
			t.Errorf("list talosmachines labels %q fields %q: %v", c.labels, c.fields, err)
			continue
		}
		if got := itest.APINames(t, list); !slices.Equal(got, c.want) {
			t.Errorf("list talosmachines labels %q fields %q = %v, want %v", c.labels, c.fields, got, c.want)
		}
	}

	operations := ichor.TalosOperations(ns)
	for _, o := range []struct {
		name string
		typ  v1alpha1.OperationType
	}{{"reboot-1", v1alpha1.OperationReboot}, {"reboot-2", v1alpha1.OperationReboot}, {"defrag-1", v1alpha1.OperationEtcdDefrag}} {
		if _, err := operations.Create(ctx, itest.APITalosOperation(o.name, ns, o.typ), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", o.name, err)
		}
	}
	r2, err := operations.Get(ctx, "reboot-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r2.Status.Phase = v1alpha1.OperationRunning
	if _, err := operations.UpdateStatus(ctx, r2, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status: %v", err)
	}
	for _, c := range []struct {
		fields string
		want   []string
	}{
		{"spec.type=reboot", []string{"reboot-1", "reboot-2"}},
		{"spec.type=etcd-defrag", []string{"defrag-1"}},
		{"status.phase=Pending", []string{"defrag-1", "reboot-1"}},
		{"status.phase=Running", []string{"reboot-2"}},
		{"spec.type=reboot,status.phase=Pending", []string{"reboot-1"}},
		{"spec.clusterName=alpha", []string{"defrag-1", "reboot-1", "reboot-2"}},
	} {
		list, err := operations.List(ctx, metav1.ListOptions{FieldSelector: c.fields})
		if err != nil {
			t.Errorf("list talosoperations fields %q: %v", c.fields, err)
			continue
		}
		if got := itest.APINames(t, list); !slices.Equal(got, c.want) {
			t.Errorf("list talosoperations fields %q = %v, want %v", c.fields, got, c.want)
		}
	}

	// A field the kind does not index is refused, on list and on watch.
	_, err = machines.List(ctx, metav1.ListOptions{FieldSelector: "spec.address=10.5.0.10:50000"})
	if !apierrors.IsBadRequest(err) {
		t.Fatalf("list with unsupported field label: want 400 BadRequest, got %v", err)
	}
	if !strings.Contains(err.Error(), "spec.address") {
		t.Errorf("unsupported field label error does not name the label: %v", err)
	}
	if w, err := operations.Watch(ctx, metav1.ListOptions{FieldSelector: "spec.machines=x"}); !apierrors.IsBadRequest(err) {
		if w != nil {
			w.Stop()
		}
		t.Errorf("watch with unsupported field label: want 400 BadRequest, got %v", err)
	}
}

// TestAPISelectableFieldsServed checks that every kind accepts exactly the
// field labels v1alpha1.SelectableFields declares, plus metadata.name (and
// metadata.namespace when namespaced), and refuses any other.
func TestAPISelectableFieldsServed(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	rc := itest.APIClient(t).IchorV1alpha1().RESTClient()
	resources := map[string]struct {
		plural     string
		namespaced bool
	}{
		"TalosCluster":           {"talosclusters", true},
		"TalosMachine":           {"talosmachines", true},
		"TalosConfigPatch":       {"talosconfigpatches", true},
		"TalosOperation":         {"talosoperations", true},
		"TalosCredentialRequest": {"taloscredentialrequests", true},
		"MachineReclaim":         {"machinereclaims", true},
		"TalosBackup":            {"talosbackups", true},
		"IchorUser":              {"ichorusers", false},
		"IchorInstallation":      {"ichorinstallations", false},
	}
	var kinds []string
	for kind := range v1alpha1.SelectableFields {
		kinds = append(kinds, kind)
	}
	sort.Strings(kinds)
	if len(kinds) != len(resources) {
		t.Fatalf("SelectableFields names %d kinds %v, the API has %d", len(kinds), kinds, len(resources))
	}
	for _, kind := range kinds {
		r, ok := resources[kind]
		if !ok {
			t.Errorf("SelectableFields names unknown kind %s", kind)
			continue
		}
		labels := append([]string{"metadata.name"}, v1alpha1.SelectableFields[kind]...)
		if r.namespaced {
			labels = append(labels, "metadata.namespace")
		}
		namespace := ""
		if r.namespaced {
			namespace = ns
		}
		for _, label := range labels {
			err := rc.Get().Namespace(namespace).Resource(r.plural).Param("fieldSelector", label+"=x").Do(ctx).Error()
			if err != nil {
				t.Errorf("%s: field selector %s: %v", kind, label, err)
			}
		}
		err := rc.Get().Namespace(namespace).Resource(r.plural).Param("fieldSelector", "spec.nonexistent=x").Do(ctx).Error()
		if !apierrors.IsBadRequest(err) {
			t.Errorf("%s: unsupported field label: want 400 BadRequest, got %v", kind, err)
		}
	}
}

func TestAPIPagination(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	machines := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns)
	const total = 25
	var want, wantAlpha []string
	for i := range total {
		name := fmt.Sprintf("m-%02d", i)
		cluster := "beta"
		if i%2 == 0 {
			cluster = "alpha"
			wantAlpha = append(wantAlpha, name)
		}
		if _, err := machines.Create(ctx, itest.APITalosMachine(name, ns, cluster), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		want = append(want, name)
	}

	// Unfiltered: pages of 10, 10 and 5, each name exactly once.
	var got []string
	var sizes []int
	opts := metav1.ListOptions{Limit: 10}
	for page := 0; ; page++ {
		if page > total {
			t.Fatalf("more pages than objects: continue never ends")
		}
		list, err := machines.List(ctx, opts)
		if err != nil {
			t.Fatalf("list page %d: %v", page, err)
		}
		sizes = append(sizes, len(list.Items))
		for _, m := range list.Items {
			got = append(got, m.Name)
		}
		if page == 0 {
			if rem := list.RemainingItemCount; rem == nil || *rem != total-10 {
				t.Errorf("first page remainingItemCount = %v, want %d", rem, total-10)
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	if !slices.Equal(sizes, []int{10, 10, 5}) {
		t.Errorf("page sizes = %v, want [10 10 5]", sizes)
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("paged names = %v, want each of %v exactly once", got, want)
	}

	// With a field selector, paging still yields every match exactly once.
	got = nil
	opts = metav1.ListOptions{Limit: 4, FieldSelector: "spec.clusterName=alpha"}
	for page := 0; ; page++ {
		if page > total {
			t.Fatalf("more pages than objects: continue never ends")
		}
		list, err := machines.List(ctx, opts)
		if err != nil {
			t.Fatalf("filtered list page %d: %v", page, err)
		}
		if len(list.Items) > 4 {
			t.Errorf("filtered page %d has %d items, limit 4", page, len(list.Items))
		}
		for _, m := range list.Items {
			got = append(got, m.Name)
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	sort.Strings(got)
	if !slices.Equal(got, wantAlpha) {
		t.Errorf("filtered paged names = %v, want %v", got, wantAlpha)
	}
}
