package chart

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"ichor.dev/ichor/test/integration/itest"
)

// crds stand in for cert-manager's and the Prometheus operator's APIs, so
// that kube-apiserver serves those kinds: it checks each object's kind,
// metadata and namespace, not the fields only those operators read.
func crds() string {
	var b strings.Builder
	for _, c := range []struct{ group, kind, plural string }{
		{"cert-manager.io", "Certificate", "certificates"},
		{"cert-manager.io", "Issuer", "issuers"},
		{"monitoring.coreos.com", "ServiceMonitor", "servicemonitors"},
		{"monitoring.coreos.com", "PrometheusRule", "prometheusrules"},
	} {
		fmt.Fprintf(&b, `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[3]s.%[1]s
spec:
  group: %[1]s
  names: {kind: %[2]s, plural: %[3]s, singular: %[4]s, listKind: %[2]sList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, c.group, c.kind, c.plural, strings.ToLower(c.kind))
	}
	return b.String()
}

// TestChartServerDryRun renders the chart with every ci/ values file and
// sends the result to kube-apiserver as a server-side dry run, so that it
// validates and admits every object (Pod Security's restricted level
// included) without keeping any.
func TestChartServerDryRun(t *testing.T) {
	ctx := t.Context()
	itest.MustApply(ctx, t, crds())
	t.Cleanup(func() {
		_, _, _ = itest.RunKubectl(ctx, t, []byte(crds()), "delete", "--wait", "-f", "-")
	})
	itest.MustKubectl(ctx, t, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
	for _, values := range ciValues(t) {
		name := strings.TrimSuffix(filepath.Base(values), "-values.yaml")
		t.Run(name, func(t *testing.T) {
			ns := "chart-" + name
			// What the release needs to exist before it: its namespace with
			// the restricted level (helm --create-namespace leaves it out),
			// and the namespaces its clusters live in.
			applyNamespace(t, ns, true)
			for _, other := range []string{"team-a", "team-b", "monitoring"} {
				applyNamespace(t, other, false)
			}
			args := []string{"template", "ichor", chartDir(t), "-n", ns, "-f", values}
			for _, v := range extraAPIVersions {
				args = append(args, "--api-versions", v)
			}
			manifests, err := runHelm(t, nil, args...)
			if err != nil {
				t.Fatal(err)
			}
			out, stderr, err := itest.RunKubectl(ctx, t, []byte(manifests), "apply", "--server-side", "--force-conflicts",
				"--dry-run=server", "-o", "name", "-f", "-")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(stderr, "Warning") {
				t.Errorf("the dry run warned:\n%s", stderr)
			}
			objects := strings.Fields(out)
			if len(objects) < 40 {
				t.Errorf("the dry run returned %d objects: %v", len(objects), objects)
			}
			for _, want := range []string{"apiservice.apiregistration.k8s.io/v1alpha1.ichor.dev", "deployment.apps/ichor-apiserver",
				"deployment.apps/ichor-controller", "configmap/ichor-installation"} {
				if !slices.Contains(objects, want) {
					t.Errorf("no %s in %v", want, objects)
				}
			}
		})
	}
}

// TestChartInstallAndUpgrade installs the chart with certificates it makes
// itself, and checks what it made: a CA the APIService trusts, serving
// certificates valid for each Service's names and the issuer's and console's
// hosts, ichor-ui's client certificate from a CA of its own. Upgrades keep
// every certificate unless what it is for changed (another issuer URL) or
// its renewal time came; an uninstall keeps the API's data.
func TestChartInstallAndUpgrade(t *testing.T) {
	ctx := t.Context()
	const ns = "ichor-system"
	kube := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)
	applyNamespace(t, ns, true)
	base := []string{"-n", ns, "--set", "tls.mode=generate", "--set", "monitoring.serviceMonitor=false", "--set", "monitoring.prometheusRule=false",
		"--set-json", `controller.clusterNamespaces=["team-a"]`}
	applyNamespace(t, "team-a", false)

	out, err := runHelm(t, nil, append([]string{"install", "ichor", chartDir(t)}, base...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "kubectl wait --for=condition=Available apiservice/v1alpha1.ichor.dev") {
		t.Errorf("the install printed no notes on what comes next:\n%s", out)
	}

	secrets := func() map[string]*corev1.Secret {
		t.Helper()
		got := map[string]*corev1.Secret{}
		for _, name := range []string{"ichor-ca", "ichor-ui-client-ca", "ichor-apiserver-tls", "ichor-controller-tls", "ichor-auth-tls", "ichor-ui-tls", "ichor-ui-client-tls"} {
			s, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got[name] = s
		}
		return got
	}
	installed := secrets()
	apiCA := pool(t, installed["ichor-ca"].Data["tls.crt"])
	agg := aggregatorclient.NewForConfigOrDie(itest.CP.AdminConfig)
	apiService, err := agg.ApiregistrationV1().APIServices().Get(ctx, "v1alpha1.ichor.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(apiService.Spec.CABundle) != string(installed["ichor-ca"].Data["tls.crt"]) || apiService.Spec.InsecureSkipTLSVerify {
		t.Errorf("the APIService does not trust the chart's CA alone: %+v", apiService.Spec)
	}
	verify(t, installed["ichor-apiserver-tls"], apiCA, "ichor-apiserver.ichor-system.svc", x509.ExtKeyUsageServerAuth)
	verify(t, installed["ichor-controller-tls"], apiCA, "ichor-controller.ichor-system.svc", x509.ExtKeyUsageServerAuth)
	verify(t, installed["ichor-auth-tls"], apiCA, "ichor-auth.example.net", x509.ExtKeyUsageServerAuth)
	verify(t, installed["ichor-ui-tls"], apiCA, "ichor.example.net", x509.ExtKeyUsageServerAuth)
	verify(t, installed["ichor-ui-client-tls"], pool(t, installed["ichor-ui-client-ca"].Data["tls.crt"]), "", x509.ExtKeyUsageClientAuth)
	if _, err := verifyChain(installed["ichor-ui-client-tls"], apiCA, "", x509.ExtKeyUsageClientAuth); err == nil {
		t.Error("the console's client certificate is trusted by the serving CA: anything the serving CA signs could name browsers to ichor-auth")
	}
	if _, err := kube.RbacV1().RoleBindings("team-a").Get(ctx, "ichor-controller-secrets", metav1.GetOptions{}); err != nil {
		t.Errorf("controller.clusterNamespaces: %v", err)
	}

	// The same values again: nothing changes.
	if _, err := runHelm(t, nil, append([]string{"upgrade", "ichor", chartDir(t)}, base...)...); err != nil {
		t.Fatal(err)
	}
	unchanged(t, installed, secrets())

	// Another issuer URL: only ichor-auth's certificate is made again.
	if _, err := runHelm(t, nil, append([]string{"upgrade", "ichor", chartDir(t), "--set", "auth.issuerURL=https://auth.other.example"}, base...)...); err != nil {
		t.Fatal(err)
	}
	moved := secrets()
	verify(t, moved["ichor-auth-tls"], apiCA, "auth.other.example", x509.ExtKeyUsageServerAuth)
	if string(moved["ichor-auth-tls"].Data["tls.crt"]) == string(installed["ichor-auth-tls"].Data["tls.crt"]) {
		t.Error("ichor-auth's certificate was kept for the old issuer URL")
	}
	delete(installed, "ichor-auth-tls")
	unchanged(t, installed, moved)
	auth, err := kube.AppsV1().Deployments(ns).Get(ctx, "ichor-auth", metav1.GetOptions{})
	if err != nil || !slices.Contains(auth.Spec.Template.Spec.Containers[0].Args, "--issuer-url=https://auth.other.example") {
		t.Errorf("ichor-auth's Deployment: %v %v", err, auth.Spec.Template.Spec.Containers[0].Args)
	}

	// ichor-apiserver's certificate is due for renewal: the next upgrade
	// makes it again, from the same CA, and restarts the pods that serve it.
	before, err := kube.AppsV1().Deployments(ns).Get(ctx, "ichor-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The time passes as Helm recorded it: the whole Secret again, by Helm's
	// own field manager, with the renewal time in the past.
	due := moved["ichor-apiserver-tls"].DeepCopy()
	due.Annotations["ichor.dev/renew-after"] = strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	due.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}
	due.ManagedFields, due.ResourceVersion, due.UID, due.CreationTimestamp = nil, "", "", metav1.Time{}
	body, err := json.Marshal(due)
	if err != nil {
		t.Fatal(err)
	}
	force := true
	if _, err := kube.CoreV1().Secrets(ns).Patch(ctx, "ichor-apiserver-tls", types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: "helm", Force: &force}); err != nil {
		t.Fatal(err)
	}
	if _, err := runHelm(t, nil, append([]string{"upgrade", "ichor", chartDir(t), "--set", "auth.issuerURL=https://auth.other.example"}, base...)...); err != nil {
		t.Fatal(err)
	}
	renewed := secrets()
	verify(t, renewed["ichor-apiserver-tls"], apiCA, "ichor-apiserver.ichor-system.svc", x509.ExtKeyUsageServerAuth)
	if string(renewed["ichor-apiserver-tls"].Data["tls.crt"]) == string(moved["ichor-apiserver-tls"].Data["tls.crt"]) {
		t.Error("the certificate due for renewal was kept")
	}
	after, err := kube.AppsV1().Deployments(ns).Get(ctx, "ichor-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if before.Spec.Template.Annotations["checksum/tls"] == after.Spec.Template.Annotations["checksum/tls"] {
		t.Error("ichor-apiserver's pods would keep serving the old certificate: its pod template did not change")
	}
	delete(moved, "ichor-apiserver-tls")
	unchanged(t, moved, renewed)

	// An uninstall removes Ichor but keeps its API's data. (Without --wait:
	// nothing here has a finalizer, and helm's wait would watch, through
	// discovery, an API whose server never ran.)
	if _, err := runHelm(t, nil, "uninstall", "ichor", "-n", ns); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "ichor-etcd", metav1.GetOptions{}); err != nil {
		t.Errorf("the uninstall took the embedded etcd's volume: %v", err)
	}
	for _, gone := range []string{"ichor-apiserver", "ichor-controller"} {
		if _, err := kube.AppsV1().Deployments(ns).Get(ctx, gone, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Deployment %s after the uninstall: %v", gone, err)
		}
	}
	if _, err := agg.ApiregistrationV1().APIServices().Get(ctx, "v1alpha1.ichor.dev", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("APIService after the uninstall: %v", err)
	}
}

// applyNamespace makes the namespace name, at Pod Security's restricted
// level when restricted (as the chart's namespace.create makes it; helm
// --create-namespace leaves the label out).
func applyNamespace(t *testing.T, name string, restricted bool) {
	t.Helper()
	labels := map[string]string{}
	if restricted {
		labels["pod-security.kubernetes.io/enforce"] = "restricted"
	}
	ns, err := json.Marshal(corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	if err != nil {
		t.Fatal(err)
	}
	itest.MustApply(t.Context(), t, string(ns))
}

func pool(t *testing.T, pemCA []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pemCA) {
		t.Fatalf("not a PEM certificate: %q", pemCA)
	}
	return p
}

// verify checks that s holds a certificate roots issued for host and usage,
// with its key and the CA in ca.crt.
func verify(t *testing.T, s *corev1.Secret, roots *x509.CertPool, host string, usage x509.ExtKeyUsage) {
	t.Helper()
	if _, err := verifyChain(s, roots, host, usage); err != nil {
		t.Errorf("Secret %s: %v", s.Name, err)
	}
	if len(s.Data["tls.key"]) == 0 || len(s.Data["ca.crt"]) == 0 || s.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret %s: type %s, keys %v", s.Name, s.Type, slices.Sorted(func(yield func(string) bool) {
			for k := range s.Data {
				if !yield(k) {
					return
				}
			}
		}))
	}
}

func verifyChain(s *corev1.Secret, roots *x509.CertPool, host string, usage x509.ExtKeyUsage) ([][]*x509.Certificate, error) {
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		return nil, fmt.Errorf("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	return cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
}

// unchanged fails for each Secret of was whose data now differs.
func unchanged(t *testing.T, was, now map[string]*corev1.Secret) {
	t.Helper()
	for name, s := range was {
		for k, v := range s.Data {
			if string(now[name].Data[k]) != string(v) {
				t.Errorf("the upgrade changed %s's %s", name, k)
			}
		}
	}
}
