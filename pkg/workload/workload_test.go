package workload

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
)

func testBundle(t *testing.T) *secrets.Bundle {
	t.Helper()
	contract, err := config.ParseContractFromVersion("v1.13.0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestClientConfigSignsAShortLivedClientCertificate(t *testing.T) {
	b := testBundle(t)
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	cfg, err := ClientConfig(b, "https://127.0.0.1:6443", Identity{User: "ichor:controller", Groups: []string{"g1"}}, now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || string(cfg.CAData) != string(b.Certs.K8s.Crt) || cfg.Insecure {
		t.Errorf("config trusts %q at %s (insecure %t)", cfg.CAData, cfg.Host, cfg.Insecure)
	}
	block, _ := pem.Decode(cfg.CertData)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caBlock, _ := pem.Decode(b.Certs.K8s.Crt)
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		t.Errorf("not signed by the bundle's Kubernetes CA: %v", err)
	}
	if cert.Subject.CommonName != "ichor:controller" || !slices.Equal(cert.Subject.Organization, []string{"g1"}) {
		t.Errorf("subject %v", cert.Subject)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || cert.IsCA {
		t.Errorf("usages %v, CA %t", cert.ExtKeyUsage, cert.IsCA)
	}
	if got := cert.NotAfter.Sub(now); got != 10*time.Minute {
		t.Errorf("valid for %s after now, want 10m", got)
	}
	if _, err := ClientConfig(&secrets.Bundle{}, "https://x", Controller, now, time.Minute); err == nil {
		t.Error("signed without a CA")
	}
}

// TestControllerRulesStayLeast fails when the controller's role in managed
// clusters grows: on certificates.k8s.io it holds exactly what approving
// kubelet serving certificates needs; elsewhere it reads and patches nodes
// (cordon), lists pods and evicts them (drain), and deletes nothing.
func TestControllerRulesStayLeast(t *testing.T) {
	type rule struct{ group, resource, name, verb string }
	var got []rule
	for _, r := range ControllerRules() {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					names := r.ResourceNames
					if len(names) == 0 {
						names = []string{""}
					}
					for _, n := range names {
						got = append(got, rule{g, res, n, v})
					}
				}
			}
		}
	}
	want := []rule{
		{"", "nodes", "", "get"}, {"", "nodes", "", "list"}, {"", "nodes", "", "watch"}, {"", "nodes", "", "patch"},
		{"", "pods", "", "list"}, {"", "pods/eviction", "", "create"},
		// After an etcd-restore: is kube-system served as the snapshot holds it?
		{"", "namespaces", "kube-system", "get"}, {"", "namespaces", "kube-system", "list"},
		{"certificates.k8s.io", "certificatesigningrequests", "", "get"},
		{"certificates.k8s.io", "certificatesigningrequests", "", "list"},
		{"certificates.k8s.io", "certificatesigningrequests", "", "watch"},
		{"certificates.k8s.io", "certificatesigningrequests/approval", "", "update"},
		{"certificates.k8s.io", "signers", KubeletServingSigner, "approve"},
		// Before a kubernetes-upgrade: are objects of the removed APIs left?
		{"resource.k8s.io", "podschedulingcontexts", "", "list"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("controller rules\n got %v\nwant %v", got, want)
	}

	// In kube-system, by name: the bootstrap token's Secret and kube-proxy's
	// DaemonSet, read and patched; nothing created, listed or deleted.
	got = nil
	for _, r := range SystemRules("bootstrap-token-abcdef") {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, n := range r.ResourceNames {
						got = append(got, rule{g, res, n, v})
					}
					if len(r.ResourceNames) == 0 {
						got = append(got, rule{g, res, "", v})
					}
				}
			}
		}
	}
	want = []rule{
		{"", "secrets", "bootstrap-token-abcdef", "get"}, {"", "secrets", "bootstrap-token-abcdef", "patch"},
		{"apps", "daemonsets", "kube-proxy", "get"}, {"apps", "daemonsets", "kube-proxy", "patch"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("kube-system rules\n got %v\nwant %v", got, want)
	}
}

func TestSetBootstrapToken(t *testing.T) {
	ctx := t.Context()
	b := testBundle(t)
	name, err := BootstrapTokenSecret(b)
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	if _, err := SetBootstrapToken(ctx, cs, b, false); !errors.Is(err, ErrTokenSecretMissing) {
		t.Fatalf("without the Secret: %v, want ErrTokenSecretMissing", err)
	}
	// As Talos creates it: authenticating.
	if _, err := cs.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"},
		Type:       corev1.SecretTypeBootstrapToken,
		Data:       map[string][]byte{"token-id": []byte("x"), tokenUsageAuthentication: []byte("true")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	usage := func() string {
		s, err := cs.CoreV1().Secrets("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(s.Data["token-id"]) != "x" {
			t.Errorf("other keys changed: %v", s.Data)
		}
		return string(s.Data[tokenUsageAuthentication])
	}
	for _, step := range []struct {
		enable, changed bool
		want            string
	}{{true, false, "true"}, {false, true, "false"}, {false, false, "false"}, {true, true, "true"}} {
		changed, err := SetBootstrapToken(ctx, cs, b, step.enable)
		if err != nil || changed != step.changed || usage() != step.want {
			t.Errorf("enable %t: changed %t, %v, usage %q; want changed %t, usage %q", step.enable, changed, err, usage(), step.changed, step.want)
		}
	}
}

// TestKubeProxyRollout: the DaemonSet is picked from a manifest's objects
// by kind, name and namespace, and its rollout waits for the controller to
// see the new template, every pod updated and every one available.
func TestKubeProxyRollout(t *testing.T) {
	objects := []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "kube-proxy", "namespace": "kube-system"}}},
		{Object: map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": map[string]any{"name": "kube-proxy", "namespace": "kube-system"},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "kube-proxy", "image": "registry.k8s.io/kube-proxy:v1.36.1"}}}}}}},
	}
	ds, err := KubeProxyDaemonSet(objects)
	if err != nil || ds == nil || KubeProxyImage(ds) != "registry.k8s.io/kube-proxy:v1.36.1" {
		t.Fatalf("picked %+v, %v", ds, err)
	}
	if ds, err := KubeProxyDaemonSet(objects[:1]); ds != nil || err != nil {
		t.Errorf("without a DaemonSet: %+v, %v", ds, err)
	}
	for _, tc := range []struct {
		generation int64
		status     appsv1.DaemonSetStatus
		want       string
	}{
		{2, appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3}, "controller to see its new template"},
		{2, appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 1, NumberAvailable: 3}, "1 of 3 pods updated, 3 available"},
		{2, appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 2}, "3 of 3 pods updated, 2 available"},
		{2, appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3}, ""},
	} {
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", Generation: tc.generation}, Status: tc.status}
		got := RolloutWaits(ds)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.status, got, tc.want)
		}
	}
}
