package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/kubeupgrade"
)

// Controller is ichor-controller's own identity in a managed cluster. It is
// bound to ControllerRole and nothing else.
var Controller = Identity{User: "ichor:controller"}

// ControllerRole names the ClusterRole (and its binding) that holds what
// ichor-controller may do in a managed cluster.
const ControllerRole = "ichor:controller"

// KubeletServingSigner is the signer of kubelet serving certificates.
const KubeletServingSigner = "kubernetes.io/kubelet-serving"

// fieldManager owns the fields ichor-controller applies in managed clusters.
const fieldManager = "ichor-controller"

// setupTTL bounds the cluster-admin certificate that installs the
// controller's role: it is used for two requests and then dropped.
const setupTTL = 5 * time.Minute

// SystemRules are what ichor-controller may do in a managed cluster's
// kube-system, by name: the bootstrap token's Secret (tokenSecret), and
// kube-proxy's DaemonSet, which a kubernetes-upgrade syncs.
func SystemRules(tokenSecret string) []rbacv1.PolicyRule {
	return append(tokenRules(tokenSecret), kubeProxyRules()...)
}

// ControllerRules are everything ichor-controller may do in a managed
// cluster: read nodes (health and counts); cordon and drain a node before
// an operation reboots it, which needs patching nodes, listing pods and
// evicting them (through the Eviction API, so PodDisruptionBudgets hold);
// and approve kubelet serving certificates, which needs reading CSRs,
// updating their approval and the approve verb on exactly that signer;
// before a kubernetes-upgrade, list the objects of the API resources the
// new version removes (kubeupgrade.ReadRules); after an etcd-restore, read
// the kube-system Namespace, by name, to confirm the restored data is
// served. No Secret, no pod deletion
// but by eviction, no write to any other object but a CSR's approval,
// nothing on another signer.
func ControllerRules() []rbacv1.PolicyRule {
	return append([]rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{metav1.NamespaceSystem}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests/approval"}, Verbs: []string{"update"}},
		{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{KubeletServingSigner}, Verbs: []string{"approve"}},
	}, kubeupgrade.ReadRules()...)
}

// InstallControllerAccess applies ControllerRole and its binding to
// Controller in the cluster at endpoint, and the Role of that name in
// kube-system (SystemRules), authenticating with a
// short-lived cluster-admin certificate signed from bundle. Applying again
// changes nothing; a rule added by hand to a role is taken away.
func InstallControllerAccess(ctx context.Context, bundle *secrets.Bundle, endpoint string, now time.Time, alsoTrusted ...[]byte) error {
	cfg, err := ClientConfig(bundle, endpoint, Identity{User: "ichor:setup", Groups: []string{MastersGroup}}, now, setupTTL, alsoTrusted...)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("workload client for %s: %w", endpoint, err)
	}
	labels := map[string]string{"app.kubernetes.io/managed-by": fieldManager}
	role := rbacac.ClusterRole(ControllerRole).WithLabels(labels)
	for _, r := range ControllerRules() {
		rule := rbacac.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...)
		if len(r.ResourceNames) > 0 {
			rule.WithResourceNames(r.ResourceNames...)
		}
		role.WithRules(rule)
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if _, err := cs.RbacV1().ClusterRoles().Apply(ctx, role, opts); err != nil {
		return fmt.Errorf("apply ClusterRole %s at %s: %w", ControllerRole, endpoint, err)
	}
	binding := rbacac.ClusterRoleBinding(ControllerRole).WithLabels(labels).
		WithRoleRef(rbacac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(ControllerRole)).
		WithSubjects(rbacac.Subject().WithAPIGroup(rbacv1.GroupName).WithKind(rbacv1.UserKind).WithName(Controller.User))
	if _, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, binding, opts); err != nil {
		return fmt.Errorf("apply ClusterRoleBinding %s at %s: %w", ControllerRole, endpoint, err)
	}

	tokenSecret, err := BootstrapTokenSecret(bundle)
	if err != nil {
		return err
	}
	tokenRole := rbacac.Role(ControllerRole, tokenNamespace).WithLabels(labels)
	for _, r := range SystemRules(tokenSecret) {
		tokenRole.WithRules(rbacac.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).
			WithResourceNames(r.ResourceNames...).WithVerbs(r.Verbs...))
	}
	if _, err := cs.RbacV1().Roles(tokenNamespace).Apply(ctx, tokenRole, opts); err != nil {
		return fmt.Errorf("apply Role %s/%s at %s: %w", tokenNamespace, ControllerRole, endpoint, err)
	}
	tokenBinding := rbacac.RoleBinding(ControllerRole, tokenNamespace).WithLabels(labels).
		WithRoleRef(rbacac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(ControllerRole)).
		WithSubjects(rbacac.Subject().WithAPIGroup(rbacv1.GroupName).WithKind(rbacv1.UserKind).WithName(Controller.User))
	if _, err := cs.RbacV1().RoleBindings(tokenNamespace).Apply(ctx, tokenBinding, opts); err != nil {
		return fmt.Errorf("apply RoleBinding %s/%s at %s: %w", tokenNamespace, ControllerRole, endpoint, err)
	}
	return nil
}

// ErrAccessInstall wraps a failure to install Controller's access.
var ErrAccessInstall = errors.New("install ichor-controller's access")

// WithAccess calls f, and when Controller is not authorized for what f
// does (a new cluster, or roles set up by an older Ichor), installs its
// access (InstallControllerAccess) and calls f again. installed says
// whether it did; a failure to install wraps ErrAccessInstall.
func WithAccess(ctx context.Context, bundle *secrets.Bundle, endpoint string, now time.Time, alsoTrusted [][]byte, f func() error) (installed bool, err error) {
	err = f()
	if !apierrors.IsForbidden(err) {
		return false, err
	}
	if err := InstallControllerAccess(ctx, bundle, endpoint, now, alsoTrusted...); err != nil {
		return false, fmt.Errorf("%w: %w", ErrAccessInstall, err)
	}
	return true, f()
}
