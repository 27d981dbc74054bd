package api

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"sigs.k8s.io/yaml"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/integration/itest"
)

// TestArtifactsServerDryRun sends every manifest in artifacts/ to the test
// kube-apiserver as a server-side dry run, so the API server validates and
// admits each object (PodSecurity included) without changing anything.
//
// The harness already applied namespace.yaml, serviceaccount.yaml,
// apiserver-rbac.yaml and roles.yaml for real, with field manager
// ichor-harness, and made its own Service ichor-system/ichor-apiserver (an
// ExternalName to loopback) and APIService v1alpha1.ichor.dev (with its port
// and caBundle) through the typed client. Hence:
//   - the installed files are re-applied exactly as installed, without
//     --force-conflicts: an upgrade does that, and it must not conflict (with
//     kube-controller-manager over aggregated rules, say);
//   - everything but service.yaml is server-side applied with
//     --force-conflicts: the APIService's spec.service.port is owned by the
//     harness's client, which a real install does not have;
//   - service.yaml cannot be applied over the harness's Service by any apply:
//     both strategic merge and server-side apply merge spec.ports by port, so
//     the manifest's 443 "https" joins the harness's loopback "https" port and
//     validation rejects the duplicate name, whatever the manifest says. A
//     dry-run replace sends the manifest as the whole object instead, which
//     is what a cluster without the harness would receive.
//
// Nothing is applied for real: the shared control plane keeps its Service and
// APIService, which the test checks at the end.
func TestArtifactsServerDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	dir, files, docs := itest.ReadArtifacts(t)
	kube := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)

	t.Run("reapply installed files without force", func(t *testing.T) {
		args := []string{"apply", "--server-side", "--field-manager=ichor-harness", "--dry-run=server"}
		for _, name := range []string{"namespace.yaml", "serviceaccount.yaml", "apiserver-rbac.yaml", "roles.yaml"} {
			args = append(args, "-f", filepath.Join(dir, name))
		}
		if _, _, err := itest.RunKubectl(ctx, t, nil, args...); err != nil {
			t.Fatal(err)
		}
		// The same as another manager, who co-owns every field with the same value.
		args[2] = "--field-manager=ichor-upgrade"
		if _, _, err := itest.RunKubectl(ctx, t, nil, args...); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("every file but service.yaml", func(t *testing.T) {
		args := []string{"apply", "--server-side", "--force-conflicts", "--dry-run=server", "-o", "json"}
		want := map[string]bool{}
		for _, file := range files {
			if filepath.Base(file) == "service.yaml" {
				continue
			}
			args = append(args, "-f", file)
		}
		for _, d := range docs {
			if d.File != "service.yaml" {
				want[d.Meta.Kind+"/"+d.Ns+"/"+d.Name] = true
			}
		}
		for _, kind := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding", "Deployment", "PersistentVolumeClaim", "APIService"} {
			if !slices.ContainsFunc(docs, func(d itest.ArtifactDoc) bool { return d.Meta.Kind == kind }) {
				t.Errorf("artifacts/ has no %s", kind)
			}
		}
		out, stderr, err := itest.RunKubectl(ctx, t, nil, args...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stderr, "PodSecurity") || strings.Contains(stderr, "Warning") {
			t.Errorf("dry-run apply warned:\n%s", stderr)
		}
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("decode dry-run output: %v\n%s", err, out)
		}
		got := map[string]bool{}
		for _, raw := range list.Items {
			var item struct {
				metav1.TypeMeta `json:",inline"`
				Metadata        metav1.ObjectMeta `json:"metadata"`
			}
			if err := json.Unmarshal(raw, &item); err != nil {
				t.Fatal(err)
			}
			got[item.Kind+"/"+item.Metadata.Namespace+"/"+item.Metadata.Name] = true
			// Applying the manifests, even forcing, must leave the rules the
			// clusterrole-aggregation controller fills in.
			if item.Kind == "ClusterRole" {
				var role rbacv1.ClusterRole
				if err := json.Unmarshal(raw, &role); err != nil {
					t.Fatal(err)
				}
				if role.AggregationRule == nil {
					continue
				}
				live, err := kube.RbacV1().ClusterRoles().Get(ctx, role.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(role.Rules) == 0 || !apiequality.Semantic.DeepEqual(role.Rules, live.Rules) {
					t.Errorf("a forced apply of %s would change its aggregated rules from %d to %d rules", role.Name, len(live.Rules), len(role.Rules))
				}
			}
		}
		for k := range want {
			if !got[k] {
				t.Errorf("dry-run apply did not return %s; got %v", k, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("dry-run apply returned %d objects, artifacts hold %d", len(got), len(want))
		}
	})

	t.Run("service.yaml", func(t *testing.T) {
		out, _, err := itest.RunKubectl(ctx, t, nil, "replace", "--dry-run=server", "-o", "json", "-f", filepath.Join(dir, "service.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var svc struct {
			Spec struct {
				Type     string            `json:"type"`
				Selector map[string]string `json:"selector"`
				Ports    []struct {
					Name       string `json:"name"`
					Port       int32  `json:"port"`
					TargetPort any    `json:"targetPort"`
				} `json:"ports"`
			} `json:"spec"`
		}
		if err := json.Unmarshal([]byte(out), &svc); err != nil {
			t.Fatalf("decode: %v\n%s", err, out)
		}
		if svc.Spec.Type != "ClusterIP" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort != "https" {
			t.Errorf("dry-run replace of service.yaml gave %+v", svc.Spec)
		}
	})

	// The dry runs left the shared control plane as it was.
	svc, err := kube.CoreV1().Services(harness.IchorNamespace).Get(ctx, "ichor-apiserver", metav1.GetOptions{})
	if err != nil || svc.Spec.Type != "ExternalName" {
		t.Fatalf("the harness's Service changed: %v %+v", err, svc)
	}
	agg := aggregatorclient.NewForConfigOrDie(itest.CP.AdminConfig)
	apiSvc, err := agg.ApiregistrationV1().APIServices().Get(ctx, harness.APIServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(apiSvc.Spec.CABundle) == 0 || apiSvc.Spec.Service == nil || apiSvc.Spec.Service.Port == nil || *apiSvc.Spec.Service.Port == 443 {
		t.Fatalf("the harness's APIService changed: %+v", apiSvc.Spec)
	}
	for _, c := range apiSvc.Status.Conditions {
		if c.Type == apiregistrationv1.Available && c.Status != apiregistrationv1.ConditionTrue {
			t.Fatalf("APIService not Available after the dry runs: %+v", c)
		}
	}
}

// TestArtifactsConsistent checks that the manifests agree with each other:
// the Service selects ichor-apiserver's pods and targets a port it names, the
// APIService points at the Service, each Deployment runs as its own
// ServiceAccount, and the controller's RBAC binds that ServiceAccount where
// the controller's flags say it works.
func TestArtifactsConsistent(t *testing.T) {
	_, _, docs := itest.ReadArtifacts(t)
	find := func(kind, name string) []byte {
		t.Helper()
		for _, d := range docs {
			if d.Meta.Kind == kind && d.Name == name {
				return d.Data
			}
		}
		t.Fatalf("artifacts/ has no %s %s", kind, name)
		return nil
	}
	type servicePort struct {
		Name       string `json:"name"`
		Port       int32  `json:"port"`
		TargetPort string `json:"targetPort"`
	}
	type containerPort struct {
		Name string `json:"name"`
	}
	var svc struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Selector map[string]string `json:"selector"`
			Ports    []servicePort     `json:"ports"`
		} `json:"spec"`
	}
	var deploy struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Template struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
				Spec     struct {
					ServiceAccountName string `json:"serviceAccountName"`
					Containers         []struct {
						Ports []containerPort `json:"ports"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	var apiSvc apiregistrationv1.APIService
	var sa metav1.PartialObjectMetadata
	for _, u := range []struct {
		kind string
		into any
		name string
	}{{"Service", &svc, "ichor-apiserver"}, {"Deployment", &deploy, "ichor-apiserver"}, {"APIService", &apiSvc, harness.APIServiceName}, {"ServiceAccount", &sa, harness.IchorServiceAccount}} {
		if err := yaml.Unmarshal(find(u.kind, u.name), u.into); err != nil {
			t.Fatalf("%s: %v", u.kind, err)
		}
	}
	podLabels := deploy.Spec.Template.Metadata.Labels
	for k, v := range svc.Spec.Selector {
		if podLabels[k] != v {
			t.Errorf("Service selector %s=%s does not match the Deployment's pod labels %v", k, v, podLabels)
		}
	}
	if len(svc.Spec.Selector) == 0 {
		t.Error("Service has no selector")
	}
	for _, p := range svc.Spec.Ports {
		found := false
		for _, c := range deploy.Spec.Template.Spec.Containers {
			found = found || slices.Contains(c.Ports, containerPort{Name: p.TargetPort})
		}
		if !found {
			t.Errorf("Service port %s targets %q, which no container port names", p.Name, p.TargetPort)
		}
	}
	ref := apiSvc.Spec.Service
	if ref == nil || ref.Name != svc.Metadata.Name || ref.Namespace != svc.Metadata.Namespace || ref.Port == nil ||
		!slices.ContainsFunc(svc.Spec.Ports, func(p servicePort) bool { return p.Port == *ref.Port }) {
		t.Errorf("APIService points at %+v, not at the Service %s/%s %+v", ref, svc.Metadata.Namespace, svc.Metadata.Name, svc.Spec.Ports)
	}
	if apiSvc.Spec.InsecureSkipTLSVerify {
		t.Error("APIService sets insecureSkipTLSVerify")
	}
	if deploy.Spec.Template.Spec.ServiceAccountName != sa.Name || deploy.Metadata.Namespace != sa.Namespace ||
		sa.Name != harness.IchorServiceAccount || sa.Namespace != harness.IchorNamespace {
		t.Errorf("Deployment %s/%s runs as %q; ServiceAccount is %s/%s", deploy.Metadata.Namespace, deploy.Metadata.Name,
			deploy.Spec.Template.Spec.ServiceAccountName, sa.Namespace, sa.Name)
	}

	// ichor-controller: its own ServiceAccount, bound where its flags say it works.
	var ctrlDeploy struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Template struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
				Spec     struct {
					ServiceAccountName string `json:"serviceAccountName"`
					Containers         []struct {
						Args []string `json:"args"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(find("Deployment", itest.ControllerSA), &ctrlDeploy); err != nil {
		t.Fatal(err)
	}
	var ctrlSA metav1.PartialObjectMetadata
	if err := yaml.Unmarshal(find("ServiceAccount", itest.ControllerSA), &ctrlSA); err != nil {
		t.Fatal(err)
	}
	if ctrlDeploy.Spec.Template.Spec.ServiceAccountName != itest.ControllerSA || ctrlSA.Namespace != ctrlDeploy.Metadata.Namespace ||
		ctrlSA.Namespace != harness.IchorNamespace {
		t.Errorf("ichor-controller runs as %s/%s; its ServiceAccount is %s/%s", ctrlDeploy.Metadata.Namespace,
			ctrlDeploy.Spec.Template.Spec.ServiceAccountName, ctrlSA.Namespace, ctrlSA.Name)
	}
	if ctrlLabels := ctrlDeploy.Spec.Template.Metadata.Labels; labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ctrlLabels)) {
		t.Errorf("the ichor-apiserver Service selects ichor-controller's pods (%v)", ctrlLabels)
	}
	flags := map[string]string{}
	for _, c := range ctrlDeploy.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			k, v, _ := strings.Cut(a, "=")
			flags[k] = v
		}
	}
	if flags["--leader-elect"] != "true" {
		t.Errorf("ichor-controller runs without leader election: %v", flags)
	}
	for _, b := range []struct{ name, namespace string }{
		{"ichor-controller-leader-election", flags["--leader-election-namespace"]},
	} {
		var rb rbacv1.RoleBinding
		if err := yaml.Unmarshal(find("RoleBinding", b.name), &rb); err != nil {
			t.Fatal(err)
		}
		if rb.Namespace != b.namespace || len(rb.Subjects) != 1 || rb.Subjects[0].Name != itest.ControllerSA || rb.Subjects[0].Namespace != ctrlSA.Namespace {
			t.Errorf("RoleBinding %s/%s binds %+v; the controller works in %q as %s/%s", rb.Namespace, rb.Name, rb.Subjects, b.namespace, ctrlSA.Namespace, itest.ControllerSA)
		}
	}
	var crb rbacv1.ClusterRoleBinding
	if err := yaml.Unmarshal(find("ClusterRoleBinding", itest.ControllerSA), &crb); err != nil {
		t.Fatal(err)
	}
	if len(crb.Subjects) != 1 || crb.Subjects[0].Name != itest.ControllerSA || crb.Subjects[0].Namespace != ctrlSA.Namespace || crb.RoleRef.Name != itest.ControllerSA {
		t.Errorf("ClusterRoleBinding %s binds %+v to %s", crb.Name, crb.Subjects, crb.RoleRef.Name)
	}
}

func TestLeastPrivilegeChecker(t *testing.T) {
	good := rbacv1.PolicyRule{APIGroups: []string{"ichor.dev"}, Resources: []string{"talosmachines", "talosmachines/approval"}, Verbs: []string{"get", "approve"}}
	for _, tc := range []struct {
		name string
		rule rbacv1.PolicyRule
		want []string
	}{
		{"good", good, nil},
		{"wildcard verb", rbacv1.PolicyRule{APIGroups: []string{"ichor.dev"}, Resources: []string{"talosmachines"}, Verbs: []string{"*"}}, []string{`wildcard verb "*"`}},
		{"wildcard group", rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"talosmachines"}, Verbs: []string{"get"}}, []string{`wildcard apiGroup "*"`}},
		{"wildcard resource", rbacv1.PolicyRule{APIGroups: []string{"ichor.dev"}, Resources: []string{"*"}, Verbs: []string{"get"}}, []string{`wildcard resource "*"`}},
		{"wildcard subresource", rbacv1.PolicyRule{APIGroups: []string{"ichor.dev"}, Resources: []string{"*/status"}, Verbs: []string{"get"}}, []string{`wildcard resource "*/status"`}},
		{"core secrets", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}, []string{"grants secrets"}},
		{"secrets in another group", rbacv1.PolicyRule{APIGroups: []string{"example.com"}, Resources: []string{"secrets/status"}, Verbs: []string{"list"}}, []string{"grants secrets"}},
		{"escalate", rbacv1.PolicyRule{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"escalate"}}, []string{"grants escalate"}},
		{"bind", rbacv1.PolicyRule{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"bind"}, ResourceNames: []string{"cluster-admin"}}, []string{"grants bind", "references cluster-admin"}},
		{"impersonate", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"users", "groups"}, Verbs: []string{"impersonate"}}, []string{"grants impersonate"}},
		{"non-resource URLs", rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}, []string{"nonResourceURLs"}},
		{"everything at once", rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"secrets"}, Verbs: []string{"*", "escalate"}}, []string{"wildcard apiGroup", "grants secrets", "wildcard verb", "grants escalate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := itest.LeastPrivilegeViolations("test-role", []rbacv1.PolicyRule{good, tc.rule})
			if len(got) != len(tc.want) {
				t.Fatalf("violations %q, want %d matching %q", got, len(tc.want), tc.want)
			}
			for i, want := range tc.want {
				if !strings.Contains(got[i], want) || !strings.HasPrefix(got[i], "test-role rule 1: ") {
					t.Errorf("violation %d is %q, want one about %q in rule 1", i, got[i], want)
				}
			}
		})
	}
	// The secrets holder's exception is exactly get, create, update and
	// delete on core Secrets.
	for _, tc := range []struct {
		name    string
		rule    rbacv1.PolicyRule
		allowed bool
	}{
		{"get and create", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create"}}, true},
		{"get by name", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"b"}}, true},
		{"list", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}}, false},
		{"delete", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"delete"}}, true},
		{"update", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"update"}}, true},
		{"patch", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"patch"}}, false},
		{"deletecollection", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"deletecollection"}}, false},
		{"wildcard verb", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}}, false},
		{"mixed with configmaps", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"get"}}, false},
		{"another group", rbacv1.PolicyRule{APIGroups: []string{"example.com"}, Resources: []string{"secrets"}, Verbs: []string{"get"}}, false},
		{"no verbs", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}}, false},
	} {
		secretRules, rest := itest.SplitSecretsHolderRules([]rbacv1.PolicyRule{good, tc.rule})
		if got := len(secretRules) == 1; got != tc.allowed {
			t.Errorf("secrets holder %s: allowed %v, want %v", tc.name, got, tc.allowed)
		}
		if !tc.allowed && len(itest.LeastPrivilegeViolations("holder", rest)) == 0 {
			t.Errorf("secrets holder %s: not reported", tc.name)
		}
	}
	if got := itest.BindingViolations("b", rbacv1.RoleRef{Kind: "ClusterRole", Name: "cluster-admin"}); len(got) != 1 {
		t.Errorf("a binding to cluster-admin is not reported: %q", got)
	}
	if got := itest.BindingViolations("b", rbacv1.RoleRef{Kind: "ClusterRole", Name: "ichor-admin"}); len(got) != 0 {
		t.Errorf("a binding to ichor-admin is reported: %q", got)
	}
}

// TestArtifactsLeastPrivilege holds every Role and ClusterRole in artifacts/,
// the aggregated roles as kube-controller-manager filled them, and the
// system roles the artifacts bind, to Ichor's RBAC rules; checks that
// viewer ⊂ operator ⊂ admin hold as kube-apiserver decides access; and that
// ichor-apiserver's own ServiceAccount reads no Secret anywhere.
func TestArtifactsLeastPrivilege(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	kube := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)
	_, _, docs := itest.ReadArtifacts(t)
	// The harness installs ichor-apiserver's access; the controller's and
	// ichor-auth's are installed here.
	itest.InstallControllerRBAC(ctx, t)
	itest.InstallAuth(ctx, t)
	itest.InstallUI(ctx, t)

	// The manifests.
	type roleRef struct{ kind, namespace, name string }
	referenced := map[roleRef]bool{}
	roles := 0
	for _, d := range docs {
		where := d.File + ": " + d.Meta.Kind + " " + d.Name
		var violations []string
		switch d.Meta.Kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict(d.Data, &r); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			rules := r.Rules
			if r.Name == itest.SecretsHolder {
				var secretRules []rbacv1.PolicyRule
				if secretRules, rules = itest.SplitSecretsHolderRules(rules); len(secretRules) == 0 {
					t.Errorf("%s: grants no Secret access, yet reads and generates bundles", where)
				}
			}
			if r.Name == itest.MetricsReader {
				if !slices.ContainsFunc(rules, itest.IsMetricsRule) {
					t.Errorf("%s: does not grant get on /metrics", where)
				}
				rules = slices.DeleteFunc(slices.Clone(rules), itest.IsMetricsRule)
			}
			violations = itest.LeastPrivilegeViolations(where, rules)
			// An aggregated role's rules belong to the clusterrole-aggregation
			// controller: even `rules: []` makes a server-side re-apply conflict
			// with it, or wipe the rules when forced.
			if r.AggregationRule != nil && r.Rules != nil {
				t.Errorf("%s: an aggregated ClusterRole sets rules; leave the key out", where)
			}
			roles++
		case "Role":
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict(d.Data, &r); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			rules := r.Rules
			if r.Name == itest.AuthState {
				var own []rbacv1.PolicyRule
				if own, rules = itest.SplitAuthStateRules(rules); len(own) != 1 {
					t.Errorf("%s: want one rule for its own two Secrets, found %d", where, len(own))
				}
			}
			violations = itest.LeastPrivilegeViolations(where, rules)
			roles++
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := yaml.UnmarshalStrict(d.Data, &b); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			violations = itest.BindingViolations(where, b.RoleRef)
			referenced[roleRef{b.RoleRef.Kind, "", b.RoleRef.Name}] = true
		case "RoleBinding":
			var b rbacv1.RoleBinding
			if err := yaml.UnmarshalStrict(d.Data, &b); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			violations = itest.BindingViolations(where, b.RoleRef)
			ns := d.Ns
			if b.RoleRef.Kind == "ClusterRole" {
				ns = ""
			}
			referenced[roleRef{b.RoleRef.Kind, ns, b.RoleRef.Name}] = true
		}
		for _, v := range violations {
			t.Error(v)
		}
	}
	if roles < 7 {
		t.Fatalf("found %d roles in artifacts/, want the 3 aggregated, 3 rule sets, the reclaimer and the apiserver's", roles)
	}

	// The live roles: the aggregated ones as filled in, and every role the
	// artifacts bind, system roles included.
	live := map[string][]rbacv1.PolicyRule{}
	for _, name := range []string{"ichor-viewer", "ichor-operator", "ichor-admin", "ichor-machine-reclaimer"} {
		r, err := kube.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Rules) == 0 {
			t.Fatalf("live ClusterRole %s has no rules", name)
		}
		live[name] = r.Rules
	}
	if referenced[roleRef{"ClusterRole", "", itest.MetricsReader}] {
		t.Errorf("artifacts/ binds %s: only an installation's Prometheus should hold it", itest.MetricsReader)
	}
	for ref := range referenced {
		if _, checked := live[ref.name]; checked && ref.kind == "ClusterRole" {
			continue
		}
		var rules []rbacv1.PolicyRule
		switch ref.kind {
		case "ClusterRole":
			r, err := kube.RbacV1().ClusterRoles().Get(ctx, ref.name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("ClusterRole %s bound by artifacts/: %v", ref.name, err)
			}
			rules = r.Rules
		case "Role":
			r, err := kube.RbacV1().Roles(ref.namespace).Get(ctx, ref.name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Role %s/%s bound by artifacts/: %v", ref.namespace, ref.name, err)
			}
			rules = r.Rules
		default:
			t.Fatalf("binding to a %s", ref.kind)
		}
		if ref.kind == "ClusterRole" && ref.name == itest.SecretsHolder {
			_, rules = itest.SplitSecretsHolderRules(rules)
		}
		if ref.kind == "Role" && ref.name == itest.AuthState {
			_, rules = itest.SplitAuthStateRules(rules)
		}
		for _, v := range itest.LeastPrivilegeViolations("live "+ref.kind+" "+ref.name, rules) {
			t.Error(v)
		}
	}
	for name, rules := range live {
		for _, v := range itest.LeastPrivilegeViolations("live ClusterRole "+name, rules) {
			t.Error(v)
		}
	}

	// viewer ⊂ operator ⊂ admin, and the reclaimer ⊂ admin, as kube-apiserver
	// authorizes them.
	groups := map[string]string{"ichor-viewer": "ichor:viewer", "ichor-operator": "ichor:operator", "ichor-admin": "ichor:admin"}
	for _, inclusion := range []struct {
		role   string
		supers []string
	}{
		{"ichor-viewer", []string{"ichor-operator", "ichor-admin"}},
		{"ichor-operator", []string{"ichor-admin"}},
		{"ichor-machine-reclaimer", []string{"ichor-admin"}},
	} {
		granted := itest.Accesses(live[inclusion.role])
		if len(granted) < 10 {
			t.Fatalf("%s grants only %v", inclusion.role, granted)
		}
		for _, super := range inclusion.supers {
			for _, a := range granted {
				if !itest.Allowed(ctx, t, kube, "ichor-subject", []string{groups[super]}, a, "") {
					t.Errorf("%s may %s, but %s (group %s) may not", inclusion.role, a, super, groups[super])
				}
			}
		}
	}
	// The reviews can say no: each step up grants something the one below lacks.
	for _, c := range []struct {
		group string
		a     itest.Access
	}{
		{"ichor:viewer", itest.Access{Group: "ichor.dev", Resource: "talosmachines", Verb: "create"}},
		{"ichor:operator", itest.Access{Group: "ichor.dev", Resource: "talosoperations", Subresource: "ca-rotation", Verb: "start"}},
		{"ichor:operator", itest.Access{Group: "ichor.dev", Resource: "machinereclaims", Verb: "reclaim"}},
	} {
		if itest.Allowed(ctx, t, kube, "ichor-subject", []string{c.group}, c.a, "") {
			t.Errorf("group %s may %s", c.group, c.a)
		}
	}

	// ichor-apiserver's own ServiceAccount needs no Secret access, anywhere.
	nsList, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	namespaces := []string{""} // every namespace at once
	for _, ns := range nsList.Items {
		namespaces = append(namespaces, ns.Name)
	}
	saUser := "system:serviceaccount:" + harness.IchorNamespace + ":" + harness.IchorServiceAccount
	saGroups := []string{"system:serviceaccounts", "system:serviceaccounts:" + harness.IchorNamespace}
	for _, ns := range namespaces {
		for _, verb := range []string{"get", "list", "watch"} {
			a := itest.Access{Resource: "secrets", Verb: verb}
			if itest.Allowed(ctx, t, kube, saUser, saGroups, a, ns) {
				t.Errorf("%s may %s in namespace %q", saUser, a, ns)
			}
		}
	}
	// ...but it does have what it needs: the reviews are not all "no".
	if !itest.Allowed(ctx, t, kube, saUser, saGroups, itest.Access{Group: "authorization.k8s.io", Resource: "subjectaccessreviews", Verb: "create"}, "") {
		t.Errorf("%s may not create SubjectAccessReviews", saUser)
	}
	if !itest.Allowed(ctx, t, kube, saUser, saGroups, itest.Access{Resource: "configmaps", Verb: "get", Name: "extension-apiserver-authentication"}, "kube-system") {
		t.Errorf("%s may not read kube-system/extension-apiserver-authentication", saUser)
	}

	// ichor-controller: what it needs, and as kube-apiserver decides, no more.
	// Secrets only where an admin bound ichor-controller-secrets.
	bundles := itest.CP.Namespace(t)
	itest.BindControllerSecrets(ctx, t, bundles)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return itest.Allowed(ctx, t, kube, itest.ControllerUser, itest.ControllerGroups, itest.Access{Resource: "secrets", Verb: "get"}, bundles), nil
	}); err != nil {
		t.Fatalf("the ichor-controller-secrets binding never took effect: %v", err)
	}
	for _, c := range []struct {
		a         itest.Access
		namespace string
		want      bool
	}{
		{itest.Access{Resource: "secrets", Verb: "get"}, bundles, true},
		{itest.Access{Resource: "secrets", Verb: "create"}, bundles, true},
		{itest.Access{Resource: "secrets", Verb: "get"}, "", false},
		{itest.Access{Resource: "secrets", Verb: "get"}, "kube-system", false},
		{itest.Access{Resource: "secrets", Verb: "get"}, harness.IchorNamespace, false},
		{itest.Access{Resource: "secrets", Verb: "list"}, bundles, false},
		{itest.Access{Resource: "secrets", Verb: "watch"}, bundles, false},
		// Update of bundles, delete of handed-over talosconfigs and rotated
		// CAs only: see TestControllerTouchesOnlyItsSecrets.
		{itest.Access{Resource: "secrets", Verb: "update"}, bundles, true},
		{itest.Access{Resource: "secrets", Verb: "update"}, "kube-system", false},
		{itest.Access{Resource: "secrets", Verb: "delete"}, bundles, true},
		{itest.Access{Resource: "secrets", Verb: "delete"}, "kube-system", false},
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Verb: "watch"}, "", true},
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Subresource: "status", Verb: "update"}, "", true},
		{itest.Access{Group: "ichor.dev", Resource: "talosclusters", Subresource: "status", Verb: "update"}, "", true},
		{itest.Access{Group: "ichor.dev", Resource: "ichorinstallations", Subresource: "status", Verb: "update"}, "", true},
		// Server-side apply of status, under each reconciler's field manager.
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Subresource: "status", Verb: "patch"}, "", true},
		{itest.Access{Group: "ichor.dev", Resource: "talosclusters", Subresource: "status", Verb: "patch"}, "", true},
		// It writes status, never spec.
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Verb: "update"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Verb: "patch"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "talosclusters", Verb: "patch"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "talosclusters", Verb: "delete"}, "", false},
		// Its finalizer through the endpoint that writes nothing else.
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Subresource: "finalizers", Verb: "patch"}, "", true},
		// A MachineReclaim's machines: the old one deleted, the new one
		// created and approved on the requester's behalf.
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Verb: "delete"}, "", true},
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Verb: "create"}, "default", true},
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Subresource: "approval", Verb: "approve"}, "", true},
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Subresource: "privileged-approval", Verb: "approve"}, "", true},
		{itest.Access{Group: "ichor.dev", Resource: "machinereclaims", Subresource: "status", Verb: "update"}, "", true},
		// It never starts a reclaim, an operation or an override itself.
		{itest.Access{Group: "ichor.dev", Resource: "machinereclaims", Subresource: "reclaim", Verb: "create"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "machinereclaims", Verb: "reclaim"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "talosoperations", Subresource: "start", Verb: "create"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Subresource: "override", Verb: "create"}, "", false},
		// Its own Lease, no other.
		{itest.Access{Group: "coordination.k8s.io", Resource: "leases", Verb: "update", Name: "ichor-controller"}, harness.IchorNamespace, true},
		{itest.Access{Group: "coordination.k8s.io", Resource: "leases", Verb: "update", Name: "kube-controller-manager"}, "kube-system", false},
		{itest.Access{Group: "coordination.k8s.io", Resource: "leases", Verb: "update", Name: "other"}, harness.IchorNamespace, false},
		{itest.Access{Group: "events.k8s.io", Resource: "events", Verb: "create"}, "", true},
		{itest.Access{Resource: "serviceaccounts", Verb: "impersonate"}, "", false},
	} {
		if got := itest.Allowed(ctx, t, kube, itest.ControllerUser, itest.ControllerGroups, c.a, c.namespace); got != c.want {
			t.Errorf("%s may %s in namespace %q: %v, want %v", itest.ControllerUser, c.a, c.namespace, got, c.want)
		}
	}

	// ichor-auth: its two Secrets by name, password checks, reads of users.
	for _, c := range []struct {
		a         itest.Access
		namespace string
		want      bool
	}{
		{itest.Access{Resource: "secrets", Verb: "get", Name: "ichor-auth-keys"}, harness.IchorNamespace, true},
		{itest.Access{Resource: "secrets", Verb: "update", Name: "ichor-auth-sessions"}, harness.IchorNamespace, true},
		{itest.Access{Resource: "secrets", Verb: "get", Name: "other"}, harness.IchorNamespace, false},
		{itest.Access{Resource: "secrets", Verb: "get", Name: "ichor-auth-keys"}, "kube-system", false},
		{itest.Access{Resource: "secrets", Verb: "list"}, harness.IchorNamespace, false},
		{itest.Access{Resource: "secrets", Verb: "create"}, harness.IchorNamespace, false},
		{itest.Access{Resource: "secrets", Verb: "delete", Name: "ichor-auth-keys"}, harness.IchorNamespace, false},
		{itest.Access{Group: "ichor.dev", Resource: "ichorusers", Verb: "authenticate"}, "", true},
		{itest.Access{Group: "ichor.dev", Resource: "ichorusers", Subresource: "login", Verb: "create"}, "", true},
		{itest.Access{Group: "ichor.dev", Resource: "ichorusers", Verb: "get"}, "", true},
		{itest.Access{Group: "ichor.dev", Resource: "ichorusers", Verb: "list"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "ichorusers", Verb: "update"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "ichorusers", Subresource: "password", Verb: "update"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "ichorusers", Subresource: "status", Verb: "update"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "talosclusters", Verb: "get"}, "default", false},
	} {
		if got := itest.Allowed(ctx, t, kube, itest.AuthUser, itest.AuthGroups, c.a, c.namespace); got != c.want {
			t.Errorf("%s may %s in namespace %q: %v, want %v", itest.AuthUser, c.a, c.namespace, got, c.want)
		}
	}

	// ichor-ui: nothing at all; it sends each person's own token.
	for _, c := range []struct {
		a         itest.Access
		namespace string
		want      bool
	}{
		{itest.Access{Resource: "groups", Verb: "impersonate", Name: "ichor:admin"}, "", false},
		{itest.Access{Resource: "groups", Verb: "impersonate", Name: "ichor:viewer"}, "", false},
		{itest.Access{Resource: "groups", Verb: "impersonate", Name: "system:masters"}, "", false},
		{itest.Access{Resource: "groups", Verb: "impersonate", Name: "system:authenticated"}, "", false},
		{itest.Access{Resource: "users", Verb: "impersonate", Name: "ichor:dana"}, "", false},
		{itest.Access{Resource: "users", Verb: "impersonate", Name: "oidc:ada@example.net"}, "", false},
		{itest.Access{Resource: "users", Verb: "impersonate", Name: itest.ControllerUser}, "", false},
		{itest.Access{Resource: "users", Verb: "impersonate", Name: itest.AuthUser}, "", false},
		{itest.Access{Resource: "serviceaccounts", Verb: "impersonate"}, "", false},
		{itest.Access{Resource: "uids", Verb: "impersonate"}, "", false},
		{itest.Access{Group: "authentication.k8s.io", Resource: "userextras", Verb: "impersonate"}, "", false},
		{itest.Access{Resource: "secrets", Verb: "get"}, harness.IchorNamespace, false},
		{itest.Access{Resource: "secrets", Verb: "list"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "talosclusters", Verb: "list"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "talosmachines", Subresource: "approval", Verb: "approve"}, "", false},
		{itest.Access{Group: "ichor.dev", Resource: "taloscredentialrequests", Verb: "create"}, "", false},
	} {
		if got := itest.Allowed(ctx, t, kube, itest.UIUser, itest.UIGroups, c.a, c.namespace); got != c.want {
			t.Errorf("%s may %s in namespace %q: %v, want %v", itest.UIUser, c.a, c.namespace, got, c.want)
		}
	}
}

// TestControllerTouchesOnlyItsSecrets: where ichor-controller reads
// bundles, it may update a Secret that holds one (a ca-rotation writes its
// new CA) without adding or dropping keys, labels or owners, and delete the
// talosconfigs handed over to MachineReclaims and a rotation's new CA;
// kube-apiserver refuses it anything else on Secrets, whatever it asks,
// through the ValidatingAdmissionPolicies of controller-rbac.yaml.
func TestControllerTouchesOnlyItsSecrets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	itest.InstallControllerRBAC(ctx, t)
	ns := itest.CP.Namespace(t)
	itest.BindControllerSecrets(ctx, t, ns)
	admin := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)
	for name, typ := range map[string]corev1.SecretType{
		"bundle": corev1.SecretTypeOpaque, "token": corev1.SecretTypeBasicAuth, "handed-over": v1alpha1.SecretTypeTalosconfig,
		"rotated-ca": v1alpha1.SecretTypeCARotation,
	} {
		data := map[string][]byte{"talosconfig": []byte("context: x")}
		switch typ {
		case corev1.SecretTypeBasicAuth:
			data = map[string][]byte{corev1.BasicAuthUsernameKey: []byte("u")}
		case corev1.SecretTypeOpaque:
			data = map[string][]byte{secretsbundle.BundleKey: []byte("cluster: {}")}
		}
		if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: typ, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	controller := kubernetes.NewForConfigOrDie(itest.CP.ConfigFor(itest.ControllerUser, itest.ControllerGroups...))
	// The policies take effect once kube-apiserver has loaded them; until
	// then the bundle must not go either, so its deletion is tried as a dry run.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := controller.CoreV1().Secrets(ns).Delete(ctx, "bundle", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ichor-controller deletes only Secrets of type ichor.dev/talosconfig"), nil
	}); err != nil {
		t.Fatalf("ichor-controller's deletion of an Opaque Secret was never refused by the policy")
	}
	update := func(name string, change func(*corev1.Secret)) error {
		s, err := admin.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(s)
		_, err = controller.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := update("token", func(s *corev1.Secret) { s.Data[corev1.BasicAuthUsernameKey] = []byte("v") })
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ichor-controller updates only a Secret holding a Talos secrets bundle"), nil
	}); err != nil {
		t.Fatalf("ichor-controller's update of a Secret that holds no bundle was never refused by the policy")
	}
	for _, c := range []struct {
		what   string
		name   string
		change func(*corev1.Secret)
		want   bool
	}{
		{"write a bundle's CA", "bundle", func(s *corev1.Secret) { s.Data[secretsbundle.BundleKey] = []byte("cluster: {id: x}") }, true},
		{"add a key to a bundle's Secret", "bundle", func(s *corev1.Secret) { s.Data["stolen"] = []byte("x") }, false},
		{"drop the bundle's key", "bundle", func(s *corev1.Secret) { s.Data = map[string][]byte{"other": []byte("x")} }, false},
		{"relabel a bundle's Secret", "bundle", func(s *corev1.Secret) { s.Labels = map[string]string{"ichor.dev/cluster": "other"} }, false},
		{"change a talosconfig", "handed-over", func(s *corev1.Secret) { s.Data["talosconfig"] = []byte("context: y") }, false},
	} {
		err := update(c.name, c.change)
		if c.want && err != nil {
			t.Errorf("ichor-controller may not %s: %v", c.what, err)
		}
		if !c.want && !apierrors.IsForbidden(err) {
			t.Errorf("ichor-controller may %s: %v, want Forbidden", c.what, err)
		}
	}
	for _, name := range []string{"bundle", "token"} {
		if err := controller.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("ichor-controller deletes Secret %s: %v, want Forbidden", name, err)
		}
	}
	for _, name := range []string{"handed-over", "rotated-ca"} {
		if err := controller.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("ichor-controller deletes %s: %v", name, err)
		}
	}
	// Someone else is not concerned by the policies.
	if err := admin.CoreV1().Secrets(ns).Delete(ctx, "token", metav1.DeleteOptions{}); err != nil {
		t.Errorf("an admin deletes a Secret: %v", err)
	}
}

// TestOptionalNetworkPolicy checks artifacts/optional/networkpolicy.yaml:
// kube-apiserver accepts it, it selects ichor-apiserver's pods, and it
// admits only their serving port. (No CNI here enforces it.)
func TestOptionalNetworkPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	dir, _, docs := itest.ReadArtifacts(t)
	file := filepath.Join(dir, "optional", "networkpolicy.yaml")
	out, _, err := itest.RunKubectl(ctx, t, nil, "apply", "--server-side", "--dry-run=server", "-o", "json", "-f", file)
	if err != nil {
		t.Fatal(err)
	}
	var policy networkingv1.NetworkPolicy
	if err := json.Unmarshal([]byte(out), &policy); err != nil {
		t.Fatalf("decode: %v\n%s", err, out)
	}
	var deploy appsv1.Deployment
	for _, d := range docs {
		if d.Meta.Kind == "Deployment" && d.Name == "ichor-apiserver" {
			if err := yaml.Unmarshal(d.Data, &deploy); err != nil {
				t.Fatal(err)
			}
		}
	}
	selector, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
	if err != nil || selector.Empty() || !selector.Matches(labels.Set(deploy.Spec.Template.Labels)) || policy.Namespace != deploy.Namespace {
		t.Errorf("the policy (%s, %v) does not select ichor-apiserver's pods %v in %s", policy.Namespace, policy.Spec.PodSelector, deploy.Spec.Template.Labels, deploy.Namespace)
	}
	if !slices.Equal(policy.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(policy.Spec.Ingress) != 1 {
		t.Fatalf("want one ingress rule and nothing else: %+v", policy.Spec)
	}
	rule := policy.Spec.Ingress[0]
	serving := deploy.Spec.Template.Spec.Containers[0].Ports[0]
	if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || rule.Ports[0].Port.String() != serving.Name {
		t.Errorf("the rule admits ports %+v, want only %s", rule.Ports, serving.Name)
	}
	for _, peer := range rule.From {
		if peer.PodSelector != nil || peer.NamespaceSelector != nil || peer.IPBlock == nil || len(peer.IPBlock.Except) == 0 {
			t.Errorf("peer %+v admits pods: only address blocks that except the pod network belong here", peer)
		}
	}
}
