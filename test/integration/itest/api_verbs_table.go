package itest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/admission/plugin/customverbs"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// VerbRow is one row of the verbs table: a verb on resources (resource or
// resource/subresource) and the groups that hold it by default.
type VerbRow struct {
	Verb    string
	On      []string
	Holders []string
	// Alongside are verbs the same groups hold on the same paths; they are
	// asked of the authorizer, not sent.
	Alongside []string
}

// The groups of the roles in artifacts/roles.yaml; the reclaimer group is
// bound by the test, as an installation binds ichor-machine-reclaimer.
const ReclaimerGroup = "ichor:machine-reclaimer"

var AllGroups = []string{"ichor:viewer", "ichor:operator", "ichor:admin", ReclaimerGroup, "team:nobody"}

// BoundClusterRoles are the ClusterRoles beyond the default roles the test
// binds, and the group it binds each to.
var BoundClusterRoles = map[string]string{"ichor-machine-reclaimer": ReclaimerGroup}

// VerbsTable is ichor.CustomVerbs, the in-repo table of the verbs Ichor
// checks and who holds them (docs/reference/verbs.md is generated from it),
// with the groups that hold each row.
func VerbsTable(t *testing.T) []VerbRow {
	t.Helper()
	var rows []VerbRow
	for _, r := range ichor.CustomVerbs {
		row := VerbRow{Verb: r.Verb, On: r.On, Alongside: r.Alongside}
		for _, role := range ichor.RolesFrom(r.Role) {
			row.Holders = append(row.Holders, "ichor:"+string(role))
		}
		for _, other := range r.AlsoHeldBy {
			group, ok := BoundClusterRoles[other]
			if !ok {
				t.Fatalf("%s %v: held by ClusterRole %s, which the test does not bind: add it to boundClusterRoles", r.Verb, r.On, other)
			}
			row.Holders = append(row.Holders, group)
		}
		rows = append(rows, row)
	}
	// Every custom verb ichor-apiserver asks is in the table.
	for _, verb := range []string{ichor.VerbApprove, ichor.VerbStart, ichor.VerbReclaim, ichor.VerbOverride, ichor.VerbDownload,
		ichor.VerbUpdate, ichor.VerbGrant, ichor.VerbAuthenticate} {
		if !slices.ContainsFunc(rows, func(r VerbRow) bool { return r.Verb == verb }) {
			t.Fatalf("verb %s is in no row of ichor.CustomVerbs", verb)
		}
	}
	return rows
}

// Holds asks kube-apiserver's authorizer whether user in group may verb on,
// for an object of the namespace.
func Holds(ctx context.Context, t *testing.T, kube kubernetes.Interface, user, group, ns, verb, on string) bool {
	t.Helper()
	resource, sub, _ := strings.Cut(on, "/")
	return Allowed(ctx, t, kube, user, []string{group}, Access{Group: "ichor.dev", Resource: resource, Subresource: sub, Verb: verb, Name: "x"}, ns)
}

// TableObjects are the objects the table's requests act on.
type TableObjects struct {
	Ns string
	// Operations maps an operation type to a pending operation of that type.
	Operations map[string]string
}

func NewTableObjects(ctx context.Context, t *testing.T, ns string, verbsTable []VerbRow) *TableObjects {
	t.Helper()
	ichorv1 := APIClient(t).IchorV1alpha1()
	o := &TableObjects{Ns: ns, Operations: map[string]string{}}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ichorv1.TalosClusters(ns).Create(ctx, APITalosCluster("alpha", ns), metav1.CreateOptions{}))
	must(ichorv1.TalosMachines(ns).Create(ctx, APITalosMachine("m1", ns, "alpha"), metav1.CreateOptions{}))
	must(ichorv1.TalosConfigPatches(ns).Create(ctx, APITalosConfigPatch("p1", ns), metav1.CreateOptions{}))
	must(ichorv1.MachineReclaims(ns).Create(ctx, APIMachineReclaim("r1", ns), metav1.CreateOptions{}))
	for _, row := range verbsTable {
		for _, on := range row.On {
			if typ, ok := strings.CutPrefix(on, "talosoperations/"); ok {
				// One operation per group: a started operation answers Conflict, not Forbidden, but keep them apart anyway.
				for i := range AllGroups {
					op := APITalosOperation(fmt.Sprintf("%s-%d", typ, i), ns, v1alpha1.OperationType(typ))
					switch op.Spec.Type {
					case v1alpha1.OperationTalosUpgrade:
						op.Spec.TalosUpgrade = &v1alpha1.TalosUpgradeParameters{Version: "v1.13.1"}
					case v1alpha1.OperationKubernetesUpgrade:
						op.Spec.KubernetesUpgrade = &v1alpha1.KubernetesUpgradeParameters{Version: "v1.36.1"}
					case v1alpha1.OperationEtcdRestore:
						op.Spec.EtcdRestore = &v1alpha1.EtcdRestoreParameters{Backup: "demo-20261204-0300", IdentitySecret: "demo-backup-identity"}
					case v1alpha1.OperationNodeReset, v1alpha1.OperationNodeShutdown:
						op.Spec.Machines = []string{"m1"}
					}
					must(ichorv1.TalosOperations(ns).Create(ctx, op, metav1.CreateOptions{}))
				}
				o.Operations[typ] = typ
			}
		}
	}
	for i := range AllGroups {
		must(ichorv1.TalosMachines(ns).Create(ctx, APITalosMachine(fmt.Sprintf("delete-%d", i), ns, "alpha"), metav1.CreateOptions{}))
		cpm := APITalosMachine(fmt.Sprintf("cp-%d", i), ns, "alpha")
		cpm.Spec.Role = v1alpha1.MachineRoleControlPlane
		created, err := ichorv1.TalosMachines(ns).Create(ctx, cpm, metav1.CreateOptions{})
		must(created, err)
		created.Status.Maintenance = &v1alpha1.MaintenanceStatus{CertificateFingerprint: "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=", SeenAt: metav1.Now()}
		must(ichorv1.TalosMachines(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}))
	}
	user := "verbs-table-" + ns
	must(ichorv1.IchorUsers().Create(ctx, APIIchorUser(user), metav1.CreateOptions{}))
	t.Cleanup(func() { _ = ichorv1.IchorUsers().Delete(context.Background(), user, metav1.DeleteOptions{}) })
	if _, err := ichorv1.IchorInstallations().Get(ctx, v1alpha1.InstallationName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		must(ichorv1.IchorInstallations().Create(ctx, APIIchorInstallation(), metav1.CreateOptions{}))
		t.Cleanup(func() {
			_ = ichorv1.IchorInstallations().Delete(context.Background(), v1alpha1.InstallationName, metav1.DeleteOptions{})
		})
	}
	return o
}

// Request sends the request of the table cell as user in group and returns
// its error; false when the table has no object to send it about (the
// cell is then checked on RBAC alone).
func (o *TableObjects) Request(ctx context.Context, t *testing.T, user, group, verb, on string) (bool, error) {
	t.Helper()
	as := APIClientFor(t, CP.ConfigFor(user, group)).IchorV1alpha1().RESTClient()
	admin := APIClient(t).IchorV1alpha1().RESTClient()
	resource, sub, _ := strings.Cut(on, "/")
	groupIndex := slices.Index(AllGroups, group)
	namespaced := resource != "ichorusers" && resource != "ichorinstallations"
	name := map[string]string{
		"talosclusters": "alpha", "talosmachines": "m1", "talosconfigpatches": "p1", "machinereclaims": "r1",
		"ichorusers": "verbs-table-" + o.Ns, "ichorinstallations": v1alpha1.InstallationName,
	}[resource]
	if resource == "talosoperations" {
		name = fmt.Sprintf("%s-%d", o.Operations[sub], groupIndex)
	}
	switch {
	case verb == "delete":
		// A machine per group: a holder deletes its own.
		return true, as.Delete().Namespace(o.Ns).Resource(resource).Name(fmt.Sprintf("delete-%d", groupIndex)).Do(ctx).Error()
	case on == "talosmachines/privileged-approval":
		// Asked of an approval of a control plane: cp-<group> is pinned and undecided.
		body := `{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosMachine","metadata":{"name":"` + fmt.Sprintf("cp-%d", groupIndex) +
			`"},"status":{"approval":{"decision":"Approved"}}}`
		return true, as.Patch(types.MergePatchType).Namespace(o.Ns).Resource(resource).Name(fmt.Sprintf("cp-%d", groupIndex)).SubResource("approval").
			Body([]byte(body)).Do(ctx).Error()
	case verb == "update" && on == "talosconfigpatches/privileged":
		// Not an endpoint: the verb is asked of a write of a patch in the privileged class.
		p := APITalosConfigPatch(fmt.Sprintf("privileged-%d", groupIndex), o.Ns)
		p.Spec.Patch = "machine:\n  pods:\n    - {apiVersion: v1, kind: Pod, metadata: {name: p}}\n"
		return true, as.Post().Namespace(o.Ns).Resource(resource).Body(p).Do(ctx).Error()
	case verb == "update" && on == "talosclusters/"+customverbs.SecurityDowngradeSubresource:
		// Not an endpoint: the verb is asked of a write that turns hardening
		// off, here of hardened-<group>, which SecureBoot protects.
		c := APITalosCluster(fmt.Sprintf("hardened-%d", groupIndex), o.Ns)
		c.Spec.Security.SecureBoot.Required = true
		if err := admin.Post().Namespace(o.Ns).Resource(resource).Body(c).Do(ctx).Error(); err != nil {
			t.Fatalf("create TalosCluster %s: %v", c.Name, err)
		}
		return true, as.Patch(types.MergePatchType).Namespace(o.Ns).Resource(resource).Name(c.Name).
			Body([]byte(`{"spec":{"security":{"secureBoot":{"required":false}}}}`)).Do(ctx).Error()
	}
	if name == "" && verb != "grant" {
		// No object of the resource among the table's (talosbackups).
		return false, nil
	}
	switch verb {
	case "grant":
		// Creating a user of that role: disabled, so that it is no admin
		// that the last-admin rule would keep.
		u := &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("grant-%s-%d-%s", sub, groupIndex, o.Ns)},
			Spec: v1alpha1.IchorUserSpec{Role: v1alpha1.UserRole(sub), Disabled: true}}
		err := as.Post().Resource(resource).Body(u).Do(ctx).Error()
		if err == nil {
			t.Cleanup(func() {
				if err := admin.Delete().Resource(resource).Name(u.Name).Do(context.Background()).Error(); err != nil {
					t.Errorf("delete IchorUser %s: %v", u.Name, err)
				}
			})
		}
		return true, err
	case "authenticate":
		body := fmt.Sprintf(`{"apiVersion":"ichor.dev/v1alpha1","kind":"IchorUserLogin","metadata":{"name":%q},"password":"a long enough password"}`, name)
		return true, as.Post().Resource(resource).Name(name).SubResource("login").Body([]byte(body)).Do(ctx).Error()
	case "start", "reclaim":
		kind := map[string]string{"start": "TalosOperation", "reclaim": "MachineReclaim"}[verb]
		return true, as.Post().Namespace(o.Ns).Resource(resource).Name(name).SubResource(map[string]string{"start": "start", "reclaim": "reclaim"}[verb]).
			Body([]byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"` + kind + `"}`)).Do(ctx).Error()
	case "override":
		check := map[string]v1alpha1.SafetyCheck{
			"talosclusters": v1alpha1.CheckBootstrapWaitsForControlPlanes, "talosmachines": v1alpha1.CheckControlPlaneQuorum,
			"talosconfigpatches": v1alpha1.CheckPatchSecrets,
		}[resource]
		body := fmt.Sprintf(`{"apiVersion":"ichor.dev/v1alpha1","kind":"Override","check":%q,"reason":"verbs table"}`, check)
		return true, as.Post().Namespace(o.Ns).Resource(resource).Name(name).SubResource("override").Body([]byte(body)).Do(ctx).Error()
	case "download":
		// m1 is not configured: a holder gets past the verb and is told so (Conflict).
		return true, as.Get().Namespace(o.Ns).Resource(resource).Name(name).SubResource(sub).Do(ctx).Error()
	case "update", "approve":
		if sub == "password" {
			body := fmt.Sprintf(`{"apiVersion":"ichor.dev/v1alpha1","kind":"IchorUserPassword","metadata":{"name":%q},"password":"a long enough password"}`, name)
			return true, as.Put().Resource(resource).Name(name).SubResource(sub).Body([]byte(body)).Do(ctx).Error()
		}
		// The stored object, as the admin reads it, written back through the subresource.
		get := admin.Get().Resource(resource).Name(name)
		put := as.Put().Resource(resource).Name(name).SubResource(sub)
		if namespaced {
			get, put = get.Namespace(o.Ns), put.Namespace(o.Ns)
		}
		raw, err := get.Do(ctx).Raw()
		if err != nil {
			t.Fatalf("read %s %s: %v", resource, name, err)
		}
		return true, put.Body(raw).Do(ctx).Error()
	}
	t.Fatalf("no request for %s %s", verb, on)
	return false, nil
}
