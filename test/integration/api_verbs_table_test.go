package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"ichor.dev/ichor/pkg/admission/plugin/customverbs"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// verbRow is one row of the verbs table: a verb on resources (resource or
// resource/subresource) and the groups that hold it by default.
type verbRow struct {
	verb    string
	on      []string
	holders []string
	// alongside are verbs the same groups hold on the same paths; they are
	// asked of the authorizer, not sent.
	alongside []string
}

// The groups of the roles in artifacts/roles.yaml; the reclaimer group is
// bound by the test, as an installation binds ichor-machine-reclaimer.
const reclaimerGroup = "ichor:machine-reclaimer"

var allGroups = []string{"ichor:viewer", "ichor:operator", "ichor:admin", reclaimerGroup, "team:nobody"}

// boundClusterRoles are the ClusterRoles beyond the default roles the test
// binds, and the group it binds each to.
var boundClusterRoles = map[string]string{"ichor-machine-reclaimer": reclaimerGroup}

// verbsTable is ichor.CustomVerbs, the in-repo table of the verbs Ichor
// checks and who holds them (docs/reference/verbs.md is generated from it),
// with the groups that hold each row.
func verbsTable(t *testing.T) []verbRow {
	t.Helper()
	var rows []verbRow
	for _, r := range ichor.CustomVerbs {
		row := verbRow{verb: r.Verb, on: r.On, alongside: r.Alongside}
		for _, role := range ichor.RolesFrom(r.Role) {
			row.holders = append(row.holders, "ichor:"+string(role))
		}
		for _, other := range r.AlsoHeldBy {
			group, ok := boundClusterRoles[other]
			if !ok {
				t.Fatalf("%s %v: held by ClusterRole %s, which the test does not bind: add it to boundClusterRoles", r.Verb, r.On, other)
			}
			row.holders = append(row.holders, group)
		}
		rows = append(rows, row)
	}
	// Every custom verb ichor-apiserver asks is in the table.
	for _, verb := range []string{ichor.VerbApprove, ichor.VerbStart, ichor.VerbReclaim, ichor.VerbOverride, ichor.VerbDownload,
		ichor.VerbUpdate, ichor.VerbGrant, ichor.VerbAuthenticate} {
		if !slices.ContainsFunc(rows, func(r verbRow) bool { return r.verb == verb }) {
			t.Fatalf("verb %s is in no row of ichor.CustomVerbs", verb)
		}
	}
	return rows
}

// TestVerbsTable walks every row of the verbs table (ichor.CustomVerbs) for
// every group: the kube-apiserver's authorizer (a SubjectAccessReview)
// allows the verb, and the verbs alongside it, exactly to the row's
// holders, kubectl auth can-i with impersonation says the same, and the
// request itself, sent through the aggregator as that user, is forbidden
// exactly to the others (where the table's objects give it one to send).
func TestVerbsTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := cp.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig)
	for clusterRole, group := range boundClusterRoles {
		if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: clusterRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The binding is seen by the authorizer a moment later.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return holds(ctx, t, kube, "rita", reclaimerGroup, ns, "reclaim", "machinereclaims"), nil
	}); err != nil {
		t.Fatalf("the reclaimer binding never took effect: %v", err)
	}

	table := verbsTable(t)
	objs := newTableObjects(ctx, t, ns, table)
	cells, sent := 0, 0
	for _, row := range table {
		for _, on := range row.on {
			for _, group := range allGroups {
				cells++
				want := slices.Contains(row.holders, group)
				user := "u-" + strings.ReplaceAll(group, ":", "-")
				resource, sub, _ := strings.Cut(on, "/")
				for _, verb := range append([]string{row.verb}, row.alongside...) {
					if got := holds(ctx, t, kube, user, group, ns, verb, on); got != want {
						t.Errorf("%s %s for %s: the authorizer says %v, ichor.CustomVerbs says %v", verb, on, group, got, want)
					}
					args := []string{verb, resource + ".ichor.dev", "-n", ns, "--as=" + user, "--as-group=" + group}
					if sub != "" {
						args = append(args, "--subresource="+sub)
					}
					if got := canI(ctx, t, args...); got != want {
						t.Errorf("kubectl auth can-i %s: %v, ichor.CustomVerbs says %v", strings.Join(args, " "), got, want)
					}
				}
				ok, err := objs.request(ctx, t, user, group, row.verb, on)
				if !ok {
					continue
				}
				sent++
				if forbidden := apierrors.IsForbidden(err); forbidden == want {
					t.Errorf("%s %s as %s: %v; ichor.CustomVerbs says allowed=%v", row.verb, on, group, err, want)
				}
			}
		}
	}
	if cells == 0 || sent == 0 {
		t.Fatalf("walked %d cells and sent %d requests: the table was not read", cells, sent)
	}
}

// holds asks kube-apiserver's authorizer whether user in group may verb on,
// for an object of the namespace.
func holds(ctx context.Context, t *testing.T, kube kubernetes.Interface, user, group, ns, verb, on string) bool {
	t.Helper()
	resource, sub, _ := strings.Cut(on, "/")
	return allowed(ctx, t, kube, user, []string{group}, access{group: "ichor.dev", resource: resource, subresource: sub, verb: verb, name: "x"}, ns)
}

// tableObjects are the objects the table's requests act on.
type tableObjects struct {
	ns string
	// operations maps an operation type to a pending operation of that type.
	operations map[string]string
}

func newTableObjects(ctx context.Context, t *testing.T, ns string, verbsTable []verbRow) *tableObjects {
	t.Helper()
	ichorv1 := apiClient(t).IchorV1alpha1()
	o := &tableObjects{ns: ns, operations: map[string]string{}}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ichorv1.TalosClusters(ns).Create(ctx, apiTalosCluster("alpha", ns), metav1.CreateOptions{}))
	must(ichorv1.TalosMachines(ns).Create(ctx, apiTalosMachine("m1", ns, "alpha"), metav1.CreateOptions{}))
	must(ichorv1.TalosConfigPatches(ns).Create(ctx, apiTalosConfigPatch("p1", ns), metav1.CreateOptions{}))
	must(ichorv1.MachineReclaims(ns).Create(ctx, apiMachineReclaim("r1", ns), metav1.CreateOptions{}))
	for _, row := range verbsTable {
		for _, on := range row.on {
			if typ, ok := strings.CutPrefix(on, "talosoperations/"); ok {
				// One operation per group: a started operation answers Conflict, not Forbidden, but keep them apart anyway.
				for i := range allGroups {
					op := apiTalosOperation(fmt.Sprintf("%s-%d", typ, i), ns, v1alpha1.OperationType(typ))
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
				o.operations[typ] = typ
			}
		}
	}
	for i := range allGroups {
		must(ichorv1.TalosMachines(ns).Create(ctx, apiTalosMachine(fmt.Sprintf("delete-%d", i), ns, "alpha"), metav1.CreateOptions{}))
		cpm := apiTalosMachine(fmt.Sprintf("cp-%d", i), ns, "alpha")
		cpm.Spec.Role = v1alpha1.MachineRoleControlPlane
		created, err := ichorv1.TalosMachines(ns).Create(ctx, cpm, metav1.CreateOptions{})
		must(created, err)
		created.Status.Maintenance = &v1alpha1.MaintenanceStatus{CertificateFingerprint: "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=", SeenAt: metav1.Now()}
		must(ichorv1.TalosMachines(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}))
	}
	user := "verbs-table-" + ns
	must(ichorv1.IchorUsers().Create(ctx, apiIchorUser(user), metav1.CreateOptions{}))
	t.Cleanup(func() { _ = ichorv1.IchorUsers().Delete(context.Background(), user, metav1.DeleteOptions{}) })
	if _, err := ichorv1.IchorInstallations().Get(ctx, v1alpha1.InstallationName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		must(ichorv1.IchorInstallations().Create(ctx, apiIchorInstallation(), metav1.CreateOptions{}))
		t.Cleanup(func() {
			_ = ichorv1.IchorInstallations().Delete(context.Background(), v1alpha1.InstallationName, metav1.DeleteOptions{})
		})
	}
	return o
}

// request sends the request of the table cell as user in group and returns
// its error; false when the table has no object to send it about (the
// cell is then checked on RBAC alone).
func (o *tableObjects) request(ctx context.Context, t *testing.T, user, group, verb, on string) (bool, error) {
	t.Helper()
	as := apiClientFor(t, cp.ConfigFor(user, group)).IchorV1alpha1().RESTClient()
	admin := apiClient(t).IchorV1alpha1().RESTClient()
	resource, sub, _ := strings.Cut(on, "/")
	groupIndex := slices.Index(allGroups, group)
	namespaced := resource != "ichorusers" && resource != "ichorinstallations"
	name := map[string]string{
		"talosclusters": "alpha", "talosmachines": "m1", "talosconfigpatches": "p1", "machinereclaims": "r1",
		"ichorusers": "verbs-table-" + o.ns, "ichorinstallations": v1alpha1.InstallationName,
	}[resource]
	if resource == "talosoperations" {
		name = fmt.Sprintf("%s-%d", o.operations[sub], groupIndex)
	}
	switch {
	case verb == "delete":
		// A machine per group: a holder deletes its own.
		return true, as.Delete().Namespace(o.ns).Resource(resource).Name(fmt.Sprintf("delete-%d", groupIndex)).Do(ctx).Error()
	case on == "talosmachines/privileged-approval":
		// Asked of an approval of a control plane: cp-<group> is pinned and undecided.
		body := `{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosMachine","metadata":{"name":"` + fmt.Sprintf("cp-%d", groupIndex) +
			`"},"status":{"approval":{"decision":"Approved"}}}`
		return true, as.Patch(types.MergePatchType).Namespace(o.ns).Resource(resource).Name(fmt.Sprintf("cp-%d", groupIndex)).SubResource("approval").
			Body([]byte(body)).Do(ctx).Error()
	case verb == "update" && on == "talosconfigpatches/privileged":
		// Not an endpoint: the verb is asked of a write of a patch in the privileged class.
		p := apiTalosConfigPatch(fmt.Sprintf("privileged-%d", groupIndex), o.ns)
		p.Spec.Patch = "machine:\n  pods:\n    - {apiVersion: v1, kind: Pod, metadata: {name: p}}\n"
		return true, as.Post().Namespace(o.ns).Resource(resource).Body(p).Do(ctx).Error()
	case verb == "update" && on == "talosclusters/"+customverbs.SecurityDowngradeSubresource:
		// Not an endpoint: the verb is asked of a write that turns hardening
		// off, here of hardened-<group>, which SecureBoot protects.
		c := apiTalosCluster(fmt.Sprintf("hardened-%d", groupIndex), o.ns)
		c.Spec.Security.SecureBoot.Required = true
		if err := admin.Post().Namespace(o.ns).Resource(resource).Body(c).Do(ctx).Error(); err != nil {
			t.Fatalf("create TalosCluster %s: %v", c.Name, err)
		}
		return true, as.Patch(types.MergePatchType).Namespace(o.ns).Resource(resource).Name(c.Name).
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
		u := &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("grant-%s-%d-%s", sub, groupIndex, o.ns)},
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
		return true, as.Post().Namespace(o.ns).Resource(resource).Name(name).SubResource(map[string]string{"start": "start", "reclaim": "reclaim"}[verb]).
			Body([]byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"` + kind + `"}`)).Do(ctx).Error()
	case "override":
		check := map[string]v1alpha1.SafetyCheck{
			"talosclusters": v1alpha1.CheckBootstrapWaitsForControlPlanes, "talosmachines": v1alpha1.CheckControlPlaneQuorum,
			"talosconfigpatches": v1alpha1.CheckPatchSecrets,
		}[resource]
		body := fmt.Sprintf(`{"apiVersion":"ichor.dev/v1alpha1","kind":"Override","check":%q,"reason":"verbs table"}`, check)
		return true, as.Post().Namespace(o.ns).Resource(resource).Name(name).SubResource("override").Body([]byte(body)).Do(ctx).Error()
	case "download":
		// m1 is not configured: a holder gets past the verb and is told so (Conflict).
		return true, as.Get().Namespace(o.ns).Resource(resource).Name(name).SubResource(sub).Do(ctx).Error()
	case "update", "approve":
		if sub == "password" {
			body := fmt.Sprintf(`{"apiVersion":"ichor.dev/v1alpha1","kind":"IchorUserPassword","metadata":{"name":%q},"password":"a long enough password"}`, name)
			return true, as.Put().Resource(resource).Name(name).SubResource(sub).Body([]byte(body)).Do(ctx).Error()
		}
		// The stored object, as the admin reads it, written back through the subresource.
		get := admin.Get().Resource(resource).Name(name)
		put := as.Put().Resource(resource).Name(name).SubResource(sub)
		if namespaced {
			get, put = get.Namespace(o.ns), put.Namespace(o.ns)
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

// TestEveryServedPathIsGranted: every resource and subresource ichor-apiserver
// serves (as discovery lists them) is granted to some role of
// artifacts/roles.yaml or, for the parts only the controller writes (status,
// finalizers), by artifacts/controller-rbac.yaml. A subresource served that
// nobody may use, or that a role reaches only through a wildcard, fails
// here; an action without its custom verb does not build (resource.Definition).
func TestEveryServedPathIsGranted(t *testing.T) {
	_, _, docs := readArtifacts(t)
	granted := map[string]map[string]bool{} // resource path -> verbs
	for _, d := range docs {
		if d.meta.Kind != "ClusterRole" && d.meta.Kind != "Role" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(d.data, &role); err != nil {
			t.Fatal(err)
		}
		for _, rule := range role.Rules {
			if !slices.Contains(rule.APIGroups, v1alpha1.GroupName) {
				continue
			}
			for _, res := range rule.Resources {
				if granted[res] == nil {
					granted[res] = map[string]bool{}
				}
				for _, v := range rule.Verbs {
					granted[res][v] = true
				}
			}
		}
	}
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig)
	list, err := kube.Discovery().ServerResourcesForGroupVersion(v1alpha1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.APIResources {
		if len(granted[r.Name]) == 0 {
			t.Errorf("%s is served (%v) but no role in artifacts/ grants anything on it", r.Name, r.Verbs)
		}
	}
	// An action's own verb is granted to the role that uses it.
	for _, path := range []string{"talosoperations/start", "machinereclaims/reclaim", "talosclusters/override", "talosmachines/override", "talosconfigpatches/override"} {
		if !granted[path]["create"] {
			t.Errorf("nobody may create %s", path)
		}
	}
}
