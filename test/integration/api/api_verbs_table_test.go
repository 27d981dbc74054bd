package api

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

// TestVerbsTable walks every row of the verbs table (ichor.CustomVerbs) for
// every group: the kube-apiserver's authorizer (a SubjectAccessReview)
// allows the verb, and the verbs alongside it, exactly to the row's
// holders, kubectl auth can-i with impersonation says the same (for a
// holder and another group of each row), and the
// request itself, sent through the aggregator as that user, is forbidden
// exactly to the others (where the table's objects give it one to send).
func TestVerbsTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := itest.CP.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)
	for clusterRole, group := range itest.BoundClusterRoles {
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
		return itest.Holds(ctx, t, kube, "rita", itest.ReclaimerGroup, ns, "reclaim", "machinereclaims"), nil
	}); err != nil {
		t.Fatalf("the reclaimer binding never took effect: %v", err)
	}

	table := itest.VerbsTable(t)
	objs := itest.NewTableObjects(ctx, t, ns, table)
	cells, sent := 0, 0
	for _, row := range table {
		for _, on := range row.On {
			askedKubectl := map[bool]bool{}
			for _, group := range itest.AllGroups {
				cells++
				want := slices.Contains(row.Holders, group)
				user := "u-" + strings.ReplaceAll(group, ":", "-")
				resource, sub, _ := strings.Cut(on, "/")
				for _, verb := range append([]string{row.Verb}, row.Alongside...) {
					if got := itest.Holds(ctx, t, kube, user, group, ns, verb, on); got != want {
						t.Errorf("%s %s for %s: the authorizer says %v, ichor.CustomVerbs says %v", verb, on, group, got, want)
					}
				}
				// kubectl asks the authorizer the same question: once for a
				// holder and once for another group of each row is enough
				// to show it tells people the truth, at a process a call.
				if !askedKubectl[want] {
					askedKubectl[want] = true
					args := []string{row.Verb, resource + ".ichor.dev", "-n", ns, "--as=" + user, "--as-group=" + group}
					if sub != "" {
						args = append(args, "--subresource="+sub)
					}
					if got := itest.CanI(ctx, t, args...); got != want {
						t.Errorf("kubectl auth can-i %s: %v, ichor.CustomVerbs says %v", strings.Join(args, " "), got, want)
					}
				}
				ok, err := objs.Request(ctx, t, user, group, row.Verb, on)
				if !ok {
					continue
				}
				sent++
				if forbidden := apierrors.IsForbidden(err); forbidden == want {
					t.Errorf("%s %s as %s: %v; ichor.CustomVerbs says allowed=%v", row.Verb, on, group, err, want)
				}
			}
		}
	}
	if cells == 0 || sent == 0 {
		t.Fatalf("walked %d cells and sent %d requests: the table was not read", cells, sent)
	}
}

// TestEveryServedPathIsGranted: every resource and subresource ichor-apiserver
// serves (as discovery lists them) is granted to some role of
// artifacts/roles.yaml or, for the parts only the controller writes (status,
// finalizers), by artifacts/controller-rbac.yaml. A subresource served that
// nobody may use, or that a role reaches only through a wildcard, fails
// here; an action without its custom verb does not build (resource.Definition).
func TestEveryServedPathIsGranted(t *testing.T) {
	_, _, docs := itest.ReadArtifacts(t)
	granted := map[string]map[string]bool{} // resource path -> verbs
	for _, d := range docs {
		if d.Meta.Kind != "ClusterRole" && d.Meta.Kind != "Role" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(d.Data, &role); err != nil {
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
	kube := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)
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
