package itest

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// KubernetesKeyRotation: an admin rotates a v1.14-contract cluster's
// service-account signing key and secretbox key in three phases, one
// control plane at a time; the controller is stopped once in the second
// phase. Nothing is lost: a Secret written before the rotation reads the
// same afterwards, when only the new secretbox key is left to read it
// with; a token signed before the rotation works until the old key is
// dropped, one signed in the second phase after it. On a v1.13 contract,
// mixed with the disk key, or by an operator, the rotation is refused.
func (d *DemoCluster) KubernetesKeyRotation(t *testing.T) {
	ctx := d.Ctx
	kube := kubernetes.NewForConfigOrDie(CP.AdminConfig)
	bundleData := func() []byte {
		s, err := kube.CoreV1().Secrets(d.Ns).Get(ctx, "demo-secrets", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Data[secretsbundle.BundleKey]
	}
	before, err := secretsbundle.Parse(bundleData())
	if err != nil {
		t.Fatal(err)
	}

	// Refusals: the disk key with a Kubernetes key, at admission; an
	// operator's start.
	if out, err := CP.KubectlWithInput(ctx, []byte("apiVersion: ichor.dev/v1alpha1\nkind: TalosOperation\nmetadata: {name: rekey-mixed, namespace: "+d.Ns+"}\n"+
		"spec: {clusterName: demo, type: key-rotation, keyRotation: {keys: [diskEncryption, serviceAccount]}}\n"), append(Admin, "create", "-f", "-")...); err == nil ||
		!strings.Contains(out+err.Error(), "rotate them in two key-rotations") {
		t.Errorf("a key-rotation of the disk key with the service-account key: %v\n%s", err, out)
	}
	d.CreateOperation(t, Operator, "rekey-by-operator", "clusterName: demo\ntype: key-rotation\nkeyRotation: {keys: [serviceAccount]}")
	out, err := CP.KubectlWithInput(ctx, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosOperation"}`),
		append(Operator, "create", "--raw", "/apis/ichor.dev/v1alpha1/namespaces/"+d.Ns+"/talosoperations/rekey-by-operator/start", "-f", "-")...)
	if err == nil || !strings.Contains(out+err.Error(), "forbidden") {
		t.Errorf("an operator started a key-rotation: %v\n%s", err, out)
	}
	// The old service-account key stays accepted a day by default.
	if out := MustKubectl(ctx, t, append(Operator, "-n", d.Ns, "get", "talosoperation", "rekey-by-operator", "-o", "jsonpath={.spec.keyRotation.serviceAccountGracePeriod}")...); out != "24h0m0s" {
		t.Errorf("the default grace period of the old service-account key: %q, want 24h0m0s", out)
	}

	// What must survive: a Secret written with the old secretbox key, and
	// a token signed with the old service-account key.
	dir := t.TempDir()
	admin := WriteKubeconfig(t, dir, "admin", d.Endpoint, before.Certs.K8s, before.Certs.K8s.Crt)
	workloadKubectl(ctx, t, admin, "create", "secret", "generic", "written-before", "-n", "default", "--from-literal=payload=kept-across-the-rotation")
	workloadKubectl(ctx, t, admin, "create", "serviceaccount", "rotation-probe", "-n", "default")
	oldToken := tokenKubeconfig(t, dir, "old-token", d.Endpoint, before.Certs.K8s.Crt,
		strings.TrimSpace(workloadKubectl(ctx, t, admin, "create", "token", "rotation-probe", "-n", "default", "--duration=2h")))
	if out, err := workloadKubectlResult(ctx, oldToken, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || out != "system:serviceaccount:default:rotation-probe" {
		t.Fatalf("a service-account token before the rotation: %v\n%s", err, out)
	}

	rotationTune := func(o *ctrlcmd.Options) {
		d.Tune(o)
		o.OperationStepTimeout = 2 * time.Minute
	}
	d.Controller.Stop()
	d.Controller = RunController(d.Parent, rotationTune)
	defer func() {
		d.Controller.Stop()
		d.Controller = RunController(d.Parent, d.Tune)
	}()
	d.CreateOperation(t, Admin, "rekey-kube", "clusterName: demo\ntype: key-rotation\nkeyRotation: {keys: [serviceAccount, secretsEncryption], serviceAccountGracePeriod: 30s}")
	d.StartOperation(t, Admin, "rekey-kube")
	var seen []v1alpha1.CARotationPhase
	var newToken string
	restarted := false
	err = wait.PollUntilContextTimeout(ctx, ControllerPoll, ClusterWait, true, func(ctx context.Context) (bool, error) {
		c := GetCluster(t, d.Ns, "demo")
		r := c.Status.KubernetesKeyRotation
		if r == nil {
			return c.Status.SecretsEncryptionKeyName != "", nil
		}
		if len(seen) > 0 && seen[len(seen)-1] == r.Phase {
			return false, nil
		}
		seen = append(seen, r.Phase)
		// Until the old key is dropped, a token it signed works; the
		// Secret reads the same in every phase.
		if r.Phase != v1alpha1.CARotationDropOld {
			if out, err := workloadKubectlResult(ctx, oldToken, "auth", "whoami"); err != nil {
				t.Errorf("phase %s: the token signed before the rotation: %v\n%s", r.Phase, err, out)
			}
		}
		if got := workloadKubectl(ctx, t, admin, "get", "secret", "written-before", "-n", "default", "-o", "jsonpath={.data.payload}"); got != "a2VwdC1hY3Jvc3MtdGhlLXJvdGF0aW9u" {
			t.Errorf("phase %s: the Secret written before the rotation reads %q", r.Phase, got)
		}
		if r.Phase == v1alpha1.CARotationIssueNew && !restarted {
			d.Controller.Stop()
			d.Controller = RunController(d.Parent, rotationTune)
			restarted = true
		}
		if r.Phase == v1alpha1.CARotationIssueNew && newToken == "" {
			// Every control plane may not sign with the new key yet: the
			// phase rolls out one at a time. Signed once the step of the
			// last one is done, the token is the new key's.
			if err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ClusterWait, true, func(context.Context) (bool, error) {
				op := getOperation(t, d.Ns, "rekey-kube")
				return !slices.ContainsFunc(op.Status.Steps, func(s v1alpha1.OperationStep) bool {
					return s.Action == v1alpha1.ActionIssueFromNewKeys && s.Phase != v1alpha1.OperationSucceeded
				}), nil
			}); err != nil {
				t.Fatalf("the IssueNew steps: %v", err)
			}
			newToken = tokenKubeconfig(t, dir, "new-token", d.Endpoint, before.Certs.K8s.Crt,
				strings.TrimSpace(workloadKubectl(ctx, t, admin, "create", "token", "rotation-probe", "-n", "default", "--duration=2h")))
			// The old key stays for the grace period, and the operation says so.
			if err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ClusterWait, true, func(context.Context) (bool, error) {
				c := meta.FindStatusCondition(getOperation(t, d.Ns, "rekey-kube").Status.Conditions, v1alpha1.OperationConditionProgressing)
				return c != nil && c.Reason == v1alpha1.OperationReasonKeyGracePeriod && strings.Contains(c.Message, "the old service-account key stays accepted until"), nil
			}); err != nil {
				t.Errorf("the operation never said it waits for the grace period: %v", err)
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the rotation did not end (phases seen %v): %v\n%s", seen, err, DescribeOperation(getOperation(t, d.Ns, "rekey-kube")))
	}
	op := d.WaitOperationEnds(t, "rekey-kube", v1alpha1.OperationSucceeded)
	if n := len(op.Status.Steps); n != 3*3 {
		t.Errorf("%d steps, want one per control plane in each of three phases: %s", n, DescribeOperation(op))
	}
	for _, s := range op.Status.Steps {
		if s.Phase != v1alpha1.OperationSucceeded || !strings.Contains(s.Message, "kube-apiserver serves the keys of phase") {
			t.Errorf("step %s: %s %s", s.Name(), s.Phase, s.Message)
		}
	}
	if len(seen) < 2 || seen[0] != v1alpha1.CARotationAcceptNew || !slices.Contains(seen, v1alpha1.CARotationIssueNew) || !restarted {
		t.Errorf("phases seen %v (controller restarted in IssueNew: %v)", seen, restarted)
	}
	WaitEventSaying(ctx, t, d.Ns, "demo", corev1.EventTypeNormal, v1alpha1.EventSecretsRewritten, "Secrets again, encrypted with the new secretbox key")
	WaitEventSaying(ctx, t, d.Ns, "demo", corev1.EventTypeNormal, v1alpha1.EventKeysRotated, "rotated the service-account and secrets-encryption keys")

	// The bundle holds the new keys; the cluster names the new secretbox
	// key; the rotation's own Secret is gone.
	after, err := secretsbundle.Parse(bundleData())
	if err != nil {
		t.Fatal(err)
	}
	c := GetCluster(t, d.Ns, "demo")
	if string(after.Certs.K8sServiceAccount.Key) == string(before.Certs.K8sServiceAccount.Key) ||
		after.Secrets.SecretboxEncryptionSecret == before.Secrets.SecretboxEncryptionSecret || c.Status.SecretsEncryptionKeyName != "key3" {
		t.Errorf("after the rotation the bundle must hold new keys, and the cluster name key3: %q", c.Status.SecretsEncryptionKeyName)
	}
	if _, err := kube.CoreV1().Secrets(d.Ns).Get(ctx, "demo-secrets-keys-next", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the new keys' own Secret outlived the rotation: %v", err)
	}
	// Nothing lost: kube-apiserver now reads Secrets with key3 alone.
	if got := workloadKubectl(ctx, t, admin, "get", "secret", "written-before", "-n", "default", "-o", "jsonpath={.data.payload}"); got != "a2VwdC1hY3Jvc3MtdGhlLXJvdGF0aW9u" {
		t.Errorf("after the rotation, the Secret written before it reads %q", got)
	}
	if out, err := workloadKubectlResult(ctx, oldToken, "auth", "whoami"); err == nil || !strings.Contains(out, "Unauthorized") {
		t.Errorf("the token signed with the dropped key: %v, want Unauthorized\n%s", err, out)
	}
	if out, err := workloadKubectlResult(ctx, newToken, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || out != "system:serviceaccount:default:rotation-probe" {
		t.Errorf("the token signed in phase IssueNew: %v\n%s", err, out)
	}
	// Each control plane's config, as talosctl v1.14.1 reads it (its
	// secrets take os:admin), has the new keys alone.
	config := d.AdminTalosconfig(t)
	for name, node := range d.Nodes {
		if !strings.HasPrefix(name, "cp-") {
			continue
		}
		out, err := TalosctlOn(ctx, t, node)(config, "get", "machineconfig", "-o", "yaml")
		if err != nil {
			t.Errorf("talosctl get machineconfig on %s: %v\n%s", name, err, out)
			continue
		}
		if !strings.Contains(out, "name: key3") || strings.Contains(out, "name: key2") {
			t.Errorf("%s's config does not have the key3 secretbox key alone", name)
		}
	}
}

// workloadKubectl runs kubectl against the managed cluster with kubeconfig,
// retrying while its kube-apiserver restarts, and returns its output.
func workloadKubectl(ctx context.Context, t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := workloadKubectlResult(ctx, kubeconfig, args...)
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return out
}

// workloadKubectlResult is workloadKubectl that returns kubectl's error, once
// the API server answered.
func workloadKubectlResult(ctx context.Context, kubeconfig string, args ...string) (out string, err error) {
	poll := wait.PollUntilContextTimeout(ctx, time.Second, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err = kubectlAs(ctx, kubeconfig, args...)
		restarting := strings.Contains(out, "connection refused") || strings.Contains(out, "EOF") || strings.Contains(out, "ServiceUnavailable")
		return err == nil || !restarting, nil
	})
	if poll != nil && err == nil {
		err = poll
	}
	return out, err
}

// getOperation reads TalosOperation name.
func getOperation(t *testing.T, ns, name string) *v1alpha1.TalosOperation {
	t.Helper()
	op, err := APIClient(t).IchorV1alpha1().TalosOperations(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// kubectlAs runs the real kubectl with kubeconfig once.
func kubectlAs(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(CP.BinDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = []string{"HOME=" + filepath.Dir(kubeconfig)}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tokenKubeconfig writes a kubeconfig that authenticates with a bearer
// token alone (a client certificate would be authenticated first).
func tokenKubeconfig(t *testing.T, dir, name, endpoint string, trust []byte, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["demo"] = &clientcmdapi.Cluster{Server: endpoint, CertificateAuthorityData: trust}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "demo", AuthInfo: name}
	cfg.CurrentContext = name
	path := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
