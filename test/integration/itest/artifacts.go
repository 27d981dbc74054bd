package itest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"ichor.dev/ichor/test/harness"
)

// ArtifactDoc is one YAML document of artifacts/, with the file it came from.
type ArtifactDoc struct {
	File string
	Meta metav1.TypeMeta
	Name string
	Ns   string
	Data []byte
}

// ReadArtifacts splits every artifacts/*.yaml into its documents, skipping
// documents that hold only comments.
func ReadArtifacts(t testing.TB) (dir string, files []string, docs []ArtifactDoc) {
	t.Helper()
	return ReadArtifactsIn(t, ".")
}

// ReadArtifactsIn is ReadArtifacts of the directory sub of artifacts/ (ha,
// optional).
func ReadArtifactsIn(t testing.TB, sub string) (dir string, files []string, docs []ArtifactDoc) {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(root, "artifacts", sub)
	files, err = filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s/*.yaml: %v", dir, err)
	}
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for {
			data, err := reader.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				t.Fatalf("%s: %v", file, err)
			}
			var head struct {
				metav1.TypeMeta `json:",inline"`
				Metadata        struct{ Name, Namespace string } `json:"metadata"`
			}
			if err := yaml.Unmarshal(data, &head); err != nil {
				f.Close()
				t.Fatalf("%s: %v\n%s", file, err, data)
			}
			if head.Kind == "" {
				if strings.TrimSpace(StripComments(data)) != "" {
					t.Fatalf("%s: a document without kind:\n%s", file, data)
				}
				continue
			}
			docs = append(docs, ArtifactDoc{File: filepath.Base(file), Meta: head.TypeMeta, Name: head.Metadata.Name, Ns: head.Metadata.Namespace, Data: data})
		}
		f.Close()
	}
	return dir, files, docs
}

func StripComments(data []byte) string {
	var b strings.Builder
	for line := range strings.SplitSeq(string(data), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// ForbiddenVerbs let a holder grow their own power.
var ForbiddenVerbs = []string{"impersonate", "escalate", "bind"}

// LeastPrivilegeViolations lists what in rules breaks Ichor's RBAC rules: no
// wildcards, no Secrets, no impersonate/escalate/bind, no non-resource URLs,
// nothing naming cluster-admin.
func LeastPrivilegeViolations(role string, rules []rbacv1.PolicyRule) []string {
	var v []string
	add := func(i int, format string, args ...any) {
		v = append(v, fmt.Sprintf("%s rule %d: ", role, i)+fmt.Sprintf(format, args...))
	}
	for i, r := range rules {
		for _, g := range r.APIGroups {
			if strings.Contains(g, "*") {
				add(i, "wildcard apiGroup %q", g)
			}
		}
		for _, res := range r.Resources {
			if strings.Contains(res, "*") {
				add(i, "wildcard resource %q", res)
			}
			if base, _, _ := strings.Cut(res, "/"); base == "secrets" {
				add(i, "grants secrets (%q in %v)", res, r.APIGroups)
			}
		}
		for _, verb := range r.Verbs {
			if strings.Contains(verb, "*") {
				add(i, "wildcard verb %q", verb)
			}
			if slices.Contains(ForbiddenVerbs, strings.ToLower(verb)) {
				add(i, "grants %s", verb)
			}
		}
		if len(r.NonResourceURLs) > 0 {
			add(i, "grants nonResourceURLs %v", r.NonResourceURLs)
		}
		if slices.Contains(r.ResourceNames, "cluster-admin") {
			add(i, "references cluster-admin")
		}
	}
	return v
}

// SecretsHolder is the one role that may touch Secrets, bound to
// ichor-controller only in the namespaces that hold TalosClusters: it reads
// each cluster's secrets bundle by name, creates the ones it generates and
// writes a rotated CA or rotated keys into one, and deletes the talosconfig
// a user hands over to a MachineReclaim and a rotation's new CAs or keys
// once the bundle holds them
// (ValidatingAdmissionPolicies refuse it any other update or deletion).
// secretsHolderVerbs is all it may do with them: no list or watch (bundles
// are never cached).
const SecretsHolder = "ichor-controller-secrets"

var SecretsHolderVerbs = []string{"get", "create", "update", "delete"}

// MetricsReader is the one role with a non-resource URL: get on /metrics,
// for an installation to bind to its Prometheus (ichor-controller's metrics
// endpoint asks kube-apiserver whether the caller may; the same rule reads
// kube-apiserver's own /metrics, as every such role does). artifacts/ binds
// it to no one.
const MetricsReader = "ichor-metrics-reader"

// IsMetricsRule is metricsReader's rule, exactly.
func IsMetricsRule(r rbacv1.PolicyRule) bool {
	return slices.Equal(r.NonResourceURLs, []string{"/metrics"}) && slices.Equal(r.Verbs, []string{"get"}) &&
		len(r.APIGroups) == 0 && len(r.Resources) == 0 && len(r.ResourceNames) == 0
}

// SplitSecretsHolderRules separates, in the secrets holder's rules, those
// that grant exactly core Secrets with some of secretsHolderVerbs from the
// rest, which are held to leastPrivilegeViolations like every other rule: a
// Secret rule granting more, or mixing Secrets with anything else, stays
// there and is reported.
func SplitSecretsHolderRules(rules []rbacv1.PolicyRule) (secretRules, rest []rbacv1.PolicyRule) {
	for _, r := range rules {
		exact := slices.Equal(r.APIGroups, []string{""}) && slices.Equal(r.Resources, []string{"secrets"}) &&
			len(r.Verbs) > 0 && len(r.NonResourceURLs) == 0 &&
			!slices.ContainsFunc(r.Verbs, func(v string) bool { return !slices.Contains(SecretsHolderVerbs, v) })
		if exact {
			secretRules = append(secretRules, r)
		} else {
			rest = append(rest, r)
		}
	}
	return secretRules, rest
}

// AuthState is the Role of ichor-auth's own state: get and update of its
// two Secrets, by name, in its namespace; nothing else.
const AuthState = "ichor-auth-state"

// SplitAuthStateRules separates authState's one allowed rule from the rest.
func SplitAuthStateRules(rules []rbacv1.PolicyRule) (own, rest []rbacv1.PolicyRule) {
	for _, r := range rules {
		exact := slices.Equal(r.APIGroups, []string{""}) && slices.Equal(r.Resources, []string{"secrets"}) &&
			slices.Equal(r.Verbs, []string{"get", "update"}) && slices.Equal(r.ResourceNames, []string{"ichor-auth-keys", "ichor-auth-sessions"})
		if exact {
			own = append(own, r)
		} else {
			rest = append(rest, r)
		}
	}
	return own, rest
}

// BindingViolations lists what is wrong with a binding's roleRef.
func BindingViolations(binding string, ref rbacv1.RoleRef) []string {
	if ref.Name == "cluster-admin" {
		return []string{fmt.Sprintf("%s references cluster-admin", binding)}
	}
	return nil
}

// Access is one (verb, resource, subresource) a rule grants.
type Access struct {
	Group, Resource, Subresource, Verb, Name string
}

func (a Access) String() string {
	s := a.Verb + " " + a.Group + "/" + a.Resource
	if a.Subresource != "" {
		s += "/" + a.Subresource
	}
	if a.Name != "" {
		s += " named " + a.Name
	}
	return s
}

// Accesses expands rules into every access they grant.
func Accesses(rules []rbacv1.PolicyRule) []Access {
	var out []Access
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				resource, sub, _ := strings.Cut(res, "/")
				for _, verb := range r.Verbs {
					for _, name := range names {
						out = append(out, Access{g, resource, sub, verb, name})
					}
				}
			}
		}
	}
	return out
}

// Allowed asks kube-apiserver, through a SubjectAccessReview, whether user in
// groups may have a, in every namespace (namespace "").
func Allowed(ctx context.Context, t *testing.T, kube kubernetes.Interface, user string, groups []string, a Access, namespace string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: append([]string{"system:authenticated"}, groups...),
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: a.Verb, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource, Name: a.Name,
		},
	}}
	got, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview %s for %s: %v", a, user, err)
	}
	return got.Status.Allowed
}
