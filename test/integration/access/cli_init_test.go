package access

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/integration/itest"
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/talossim"
)

// TestCLIInitAndBreakGlass: init seals a new bundle under $HOME (0700,
// 0600, no plaintext), stores it and creates the cluster naming it; it
// refuses to replace a bundle; an operator cannot; break-glass opens the
// sealed copy with the passphrase alone (no kubeconfig, no server) and
// mints credentials that the bundle's CAs signed for the admin roles, and
// a wrong passphrase writes nothing.
func TestCLIInitAndBreakGlass(t *testing.T) {
	ns := itest.CP.Namespace(t)
	// Every ichor call seals or opens the bundle at scrypt's work factor
	// 20, on purpose slow; the packages side by side slow it further.
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	home := t.TempDir()
	const passphrase = "correct horse battery staple"
	env := []string{"HOME=" + home, "ICHOR_PASSPHRASE=" + passphrase}
	n := "--namespace=" + ns

	itest.RunIchor(ctx, t, env, "", "", n, "init", "demo", "--endpoint", "https://127.0.9.1:6443", "--kubernetes-version", "v1.36.0").
		Ok(t, "init", "sealed "+filepath.Join(home, ".ichor", "clusters", "demo", "bundle.age"), "secret/demo-secrets stored", "taloscluster.ichor.dev/demo created")
	dir := filepath.Join(home, ".ichor", "clusters", "demo")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v", dir, fi.Mode(), err)
	}
	sealedBytes, err := os.ReadFile(filepath.Join(dir, "bundle.age"))
	fi, _ := os.Stat(filepath.Join(dir, "bundle.age"))
	if err != nil || fi.Mode().Perm() != 0o600 || !strings.HasPrefix(string(sealedBytes), "age-encryption.org/v1") || strings.Contains(string(sealedBytes), "BEGIN") {
		t.Fatalf("sealed file (%v, mode %v) is not an age file, or holds PEM in clear", err, fi.Mode())
	}
	// One scrypt stanza, "-> scrypt <salt> <log2 N>", above age's default 18.
	if _, rest, _ := strings.Cut(string(sealedBytes), "\n"); !strings.HasPrefix(rest, "-> scrypt ") ||
		!strings.HasSuffix(strings.SplitN(rest, "\n", 2)[0], " 20") {
		t.Errorf("the sealed file's recipient stanza is not scrypt at work factor 20: %.40q", rest)
	}
	secret, err := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig).CoreV1().Secrets(ns).Get(ctx, "demo-secrets", metav1.GetOptions{})
	if err != nil || len(secret.Data["secrets.yaml"]) == 0 {
		t.Fatalf("the bundle's Secret: %v", err)
	}
	cluster, err := itest.APIClient(t).IchorV1alpha1().TalosClusters(ns).Get(ctx, "demo", metav1.GetOptions{})
	if err != nil || cluster.Spec.SecretsRef == nil || cluster.Spec.SecretsRef.Name != "demo-secrets" || cluster.Spec.ControlPlane.Endpoint != "https://127.0.9.1:6443" {
		t.Fatalf("TalosCluster demo: %+v, %v", cluster.Spec, err)
	}

	// Nothing is replaced without --force; an operator cannot store a bundle.
	itest.RunIchor(ctx, t, env, "", "", n, "init", "demo").Fails(t, "init again", "already names its bundle (Secret demo-secrets): --force replaces it")
	otherHome := t.TempDir()
	itest.RunIchor(ctx, t, []string{"HOME=" + otherHome, "ICHOR_PASSPHRASE=" + passphrase}, "olivia", "ichor:operator", n, "init", "ops",
		"--endpoint", "https://127.0.9.2:6443", "--kubernetes-version", "v1.36.0").Fails(t, "operator init", "forbidden")
	if _, err := os.Stat(filepath.Join(otherHome, ".ichor", "clusters", "ops", "bundle.age")); !os.IsNotExist(err) {
		t.Errorf("a refused init left a sealed bundle behind: %v", err)
	}
	itest.RunIchor(ctx, t, append(env, "ICHOR_PASSPHRASE=short"), "", "", n, "init", "short", "--endpoint", "https://127.0.9.3:6443",
		"--kubernetes-version", "v1.36.0").Fails(t, "a short passphrase", "at least 12 characters")

	// break-glass: a wrong passphrase writes nothing.
	out := filepath.Join(t.TempDir(), "kubeconfig")
	itest.RunIchor(ctx, t, []string{"HOME=" + home, "ICHOR_PASSPHRASE=wrong passphrase!"}, "", "", "--kubeconfig=/nonexistent", "break-glass", "kubeconfig", "demo", "-O", out).
		Fails(t, "a wrong passphrase", "wrong passphrase")
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a wrong passphrase wrote %s", out)
	}

	// The credentials: signed by the bundle's CAs, for the admin roles,
	// short-lived; no kubeconfig or server involved.
	bundle := &secrets.Bundle{}
	if err := yaml.Unmarshal(secret.Data["secrets.yaml"], bundle); err != nil {
		t.Fatal(err)
	}
	caOf := func(crtPEM []byte) *x509.Certificate {
		t.Helper()
		block, _ := pem.Decode(crtPEM)
		ca, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	r := itest.RunIchor(ctx, t, env, "", "", "--kubeconfig=/nonexistent", "break-glass", "kubeconfig", "demo", "--ttl", "30m")
	r.Ok(t, "break-glass kubeconfig")
	kc, err := clientcmd.Load([]byte(r.Stdout))
	if err != nil {
		t.Fatal(err)
	}
	kctx := kc.Contexts[kc.CurrentContext]
	if kctx == nil || kc.Clusters[kctx.Cluster].Server != "https://127.0.9.1:6443" {
		t.Fatalf("kubeconfig context %+v", kctx)
	}
	leaf := itest.VerifyLeaf(t, kc.AuthInfos[kctx.AuthInfo].ClientCertificateData, caOf(bundle.Certs.K8s.Crt))
	if !strings.HasPrefix(leaf.Subject.CommonName, "ichor:break-glass") || !slices.Contains(leaf.Subject.Organization, "system:masters") ||
		leaf.NotAfter.After(time.Now().Add(31*time.Minute)) {
		t.Errorf("kubeconfig certificate %s %v until %s", leaf.Subject.CommonName, leaf.Subject.Organization, leaf.NotAfter)
	}

	itest.RunIchor(ctx, t, env, "", "", "break-glass", "talosconfig", "demo").Fails(t, "a talosconfig without endpoints", "needs --endpoints")
	tout := filepath.Join(t.TempDir(), "talosconfig")
	itest.RunIchor(ctx, t, env, "", "", "break-glass", "talosconfig", "demo", "--endpoints", "127.0.9.11", "-O", tout).Ok(t, "break-glass talosconfig")
	tc, err := config.Open(tout)
	if err != nil {
		t.Fatal(err)
	}
	tctx := tc.Contexts[tc.Context]
	crt, err := base64.StdEncoding.DecodeString(tctx.Crt)
	if err != nil {
		t.Fatal(err)
	}
	leaf = itest.VerifyLeaf(t, crt, caOf(bundle.Certs.OS.Crt))
	if !slices.Contains(leaf.Subject.Organization, "os:admin") || !slices.Equal(tctx.Endpoints, []string{"127.0.9.11"}) {
		t.Errorf("talosconfig: roles %v, endpoints %v", leaf.Subject.Organization, tctx.Endpoints)
	}
	if fi, err := os.Stat(tout); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("talosconfig file mode %v (%v)", fi.Mode(), err)
	}
}

// TestCLIBreakGlassWithIchorStopped: a one-node cluster built by Ichor
// from the bundle `ichor init` made; with ichor-controller stopped and no
// management cluster involved (the kubeconfig flag points nowhere),
// break-glass credentials work with the real kubectl and talosctl.
func TestCLIBreakGlassWithIchorStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	itest.InstallControllerRBAC(ctx, t)
	ns := itest.CP.Namespace(t)
	itest.BindControllerSecrets(ctx, t, ns)
	controller := itest.RunController(t, func(o *ctrlcmd.Options) {
		o.MachineRecheckInterval = time.Second
		o.MachineContactTimeout = 5 * time.Second
	})
	itest.WaitHTTP(ctx, t, "http://"+controller.Probes+"/readyz")
	binDir, err := harness.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kube := &talossim.Kubernetes{BinDir: binDir, Dir: t.TempDir(), Logf: t.Logf}
	t.Cleanup(kube.Stop)
	const endpointIP = "127.0.12.100"
	ports, err := proc.FreePorts(endpointIP, 1)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := fmt.Sprintf("https://%s:%d", endpointIP, ports[0])
	home := t.TempDir()
	env := []string{"HOME=" + home, "ICHOR_PASSPHRASE=correct horse battery staple"}
	itest.RunIchor(ctx, t, env, "", "", "--namespace="+ns, "init", "solo", "--endpoint", endpoint, "--kubernetes-version", "v1.36.0").
		Ok(t, "init", "taloscluster.ichor.dev/solo created")

	node := itest.SimNode(t, talossim.Options{ListenAddress: "127.0.12.1:0", Kubernetes: kube, Etcd: &talossim.EtcdCluster{Name: "solo"},
		Trustd: talossim.NewTrustd(), InstallDelay: 100 * time.Millisecond, RebootDelay: 100 * time.Millisecond})
	itest.MustApply(ctx, t, fmt.Sprintf(`apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: solo-1, namespace: %s}
spec: {clusterName: solo, role: controlplane, address: "%s", hostname: solo-1, install: {disk: /dev/sda}}
`, ns, node.Addr()))
	itest.WaitMachine(ctx, t, ns, "solo-1", "pinned", func(m *v1alpha1.TalosMachine) bool { return m.Status.Maintenance != nil })
	itest.RunIchor(ctx, t, nil, "carol", "ichor:admin", "--namespace="+ns, "approve", "solo-1").Ok(t, "admin approves", "approved")
	itest.WaitCluster(ctx, t, ns, "solo", v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	controller.Stop()

	dir := t.TempDir()
	kubeconfig, talosconfig := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "talosconfig")
	itest.RunIchor(ctx, t, env, "", "", "--kubeconfig=/nonexistent", "break-glass", "kubeconfig", "solo", "-O", kubeconfig).Ok(t, "break-glass kubeconfig")
	itest.RunIchor(ctx, t, env, "", "", "--kubeconfig=/nonexistent", "break-glass", "talosconfig", "solo", "--endpoints", node.Addr(),
		"--nodes", strings.Split(node.Addr(), ":")[0], "-O", talosconfig).Ok(t, "break-glass talosconfig")

	kubectl := exec.CommandContext(ctx, filepath.Join(itest.CP.BinDir, "kubectl"), "--kubeconfig="+kubeconfig, "get", "nodes", "-o", "name")
	kubectl.Env = append(os.Environ(), "KUBECACHEDIR="+t.TempDir())
	if out, err := kubectl.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "node/solo-1" {
		t.Errorf("kubectl get nodes with the break-glass kubeconfig: %v\n%s", err, out)
	}
	tdir, err := proc.TalosctlBinDir()
	if err != nil {
		t.Fatal(err)
	}
	talosctl := exec.CommandContext(ctx, filepath.Join(tdir, "talosctl"), "--talosconfig", talosconfig, "get", "machineconfig", "-o", "jsonpath={.metadata.id}")
	if out, err := talosctl.CombinedOutput(); err != nil || !strings.Contains(string(out), "v1alpha1") {
		t.Errorf("talosctl get machineconfig (an os:admin read) with the break-glass talosconfig: %v\n%s", err, out)
	}
}
