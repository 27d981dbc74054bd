package workload

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The bootstrap token of a Talos cluster (cluster.token, in every machine's
// config) lets a kubelet request a client certificate for any node name,
// which the controller manager approves. Ichor lets it authenticate only
// while one of the cluster's machines is joining: outside those windows the
// token Secret Talos created keeps its name and secret but has
// usage-bootstrap-authentication "false", so a worker config's token
// authenticates nobody. Talos creates the Secret only when it is missing,
// so it never turns the usage back on behind Ichor's back.

// tokenNamespace holds bootstrap token Secrets.
const tokenNamespace = metav1.NamespaceSystem

// tokenUsageAuthentication is the Secret key kube-apiserver's bootstrap
// token authenticator requires to be "true".
const tokenUsageAuthentication = "usage-bootstrap-authentication"

// ErrTokenSecretMissing: the cluster has no Secret for its bootstrap token.
var ErrTokenSecretMissing = errors.New("the bootstrap token Secret does not exist")

// BootstrapTokenSecret is the name of the Secret holding the bundle's
// bootstrap token.
func BootstrapTokenSecret(bundle *secrets.Bundle) (string, error) {
	if bundle.Secrets == nil {
		return "", errors.New("the secrets bundle has no bootstrap token")
	}
	id, _, ok := strings.Cut(bundle.Secrets.BootstrapToken, ".")
	if !ok || id == "" {
		return "", errors.New("the secrets bundle's bootstrap token is not <id>.<secret>")
	}
	return "bootstrap-token-" + id, nil
}

// tokenRules are what the controller may do with the bootstrap token in
// kube-system: read and patch that one Secret (it already holds the token in
// the bundle), nothing else, and never create it.
func tokenRules(secretName string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secretName}, Verbs: []string{"get", "patch"}},
	}
}

// SetBootstrapToken makes the cluster's bootstrap token authenticate, or
// stop authenticating, and reports whether it changed anything.
func SetBootstrapToken(ctx context.Context, cs kubernetes.Interface, bundle *secrets.Bundle, enabled bool) (bool, error) {
	name, err := BootstrapTokenSecret(bundle)
	if err != nil {
		return false, err
	}
	secret, err := cs.CoreV1().Secrets(tokenNamespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, fmt.Errorf("%w: %s/%s", ErrTokenSecretMissing, tokenNamespace, name)
	}
	if err != nil {
		return false, err
	}
	want := fmt.Sprint(enabled)
	if string(secret.Data[tokenUsageAuthentication]) == want {
		return false, nil
	}
	// A merge patch of the one key, conditional on the Secret read, so a
	// Secret replaced in between is not patched blindly.
	patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"data":{%q:%q}}`,
		secret.ResourceVersion, tokenUsageAuthentication, base64.StdEncoding.EncodeToString([]byte(want)))
	if _, err := cs.CoreV1().Secrets(tokenNamespace).Patch(ctx, name, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		return false, err
	}
	return true, nil
}
