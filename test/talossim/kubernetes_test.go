package talossim

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/keyutil"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"ichor.dev/ichor/test/internal/proc"
)

// kubeTimeout bounds waits on the real control plane: process starts and the kubelet's 2-second
// first backoff step under -race on two cores.
const kubeTimeout = 3 * time.Minute

// serverTLSBootstrapPatch turns on kubelet serving certificate requests.
const serverTLSBootstrapPatch = `machine:
  kubelet:
    extraConfig:
      serverTLSBootstrap: true
`

// kubeTestCluster generates a cluster whose endpoint is a free loopback port, and the Kubernetes that
// serves it, stopped at test end.
func kubeTestCluster(t *testing.T) (*testCluster, *Kubernetes) {
	t.Helper()

	binDir, err := proc.BinDir()
	if err != nil {
		t.Fatalf("control-plane binaries: %v", err)
	}

	ports, err := proc.FreePorts("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}

	cl, err := generateClusterAt("https://127.0.0.1:" + strconv.Itoa(ports[0]))
	if err != nil {
		t.Fatal(err)
	}

	k := &Kubernetes{BinDir: binDir, Logf: t.Logf}
	t.Cleanup(k.Stop)

	return cl, k
}

// TestKubernetesBootstrapAndKubelets drives a simulated cluster from Bootstrap to kubelets holding
// issued serving certificates, through the real kube-apiserver and kube-controller-manager.
func TestKubernetesBootstrapAndKubelets(t *testing.T) {
	t.Parallel()

	cl, k := kubeTestCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), kubeTimeout)
	t.Cleanup(cancel)

	withBootstrap := patch(t, cl.cp, serverTLSBootstrapPatch)
	workerWithBootstrap := patch(t, cl.worker, serverTLSBootstrapPatch)

	cp := appliedNode(t, ctx, Options{ListenAddress: "127.0.2.1:0", Hostname: "cp-1", Kubernetes: k}, withBootstrap, PhaseRunning)
	w1 := appliedNode(t, ctx, Options{ListenAddress: "127.0.2.2:0", Hostname: "worker-1", Kubernetes: k, OSCA: cl.bundle.Certs.OS}, workerWithBootstrap, PhaseRunning)
	w2 := appliedNode(t, ctx, Options{ListenAddress: "127.0.2.3:0", Hostname: "worker-2", Kubernetes: k, OSCA: cl.bundle.Certs.OS}, cl.worker, PhaseRunning)
	appliedNode(t, ctx, Options{ListenAddress: "127.0.2.4:0", Hostname: "worker-3", Kubernetes: k, OSCA: cl.bundle.Certs.OS, Version: "v1.14.0"},
		kubeletDocumentLayout(t, workerWithBootstrap), PhaseRunning)

	endpoint := loadConfig(t, cl.cp).K8sClusterConfig().ClusterEndpoint().String()
	if k.Bootstrapped(endpoint) {
		t.Fatal("control plane started before Bootstrap")
	}

	admin := certClient(t, cp, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))
	if err := admin.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}

	cfg, err := k.WaitReady(ctx, endpoint)
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}

	if cfg.Host != endpoint {
		t.Errorf("admin config host = %s, want the cluster endpoint %s", cfg.Host, endpoint)
	}

	kube := kubernetes.NewForConfigOrDie(cfg)

	checkControlPlaneKeys(t, ctx, kube, cl)

	// Every kubelet bootstraps a client certificate (approved by the controller manager) and registers.
	for _, n := range []struct {
		name string
		ip   string
	}{{"cp-1", "127.0.2.1"}, {"worker-1", "127.0.2.2"}, {"worker-2", "127.0.2.3"}} {
		node := waitNode(t, ctx, kube, n.name)

		if !slices.Contains(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: n.ip}) {
			t.Errorf("node %s addresses = %v, want InternalIP %s", n.name, node.Status.Addresses, n.ip)
		}

		client := waitCSR(t, ctx, kube, certificatesv1.KubeAPIServerClientKubeletSignerName, n.name, func(csr *certificatesv1.CertificateSigningRequest) bool {
			return len(csr.Status.Certificate) > 0
		})

		if csr := parseCSR(t, client); csr.Subject.CommonName != "system:node:"+n.name || !slices.Equal(csr.Subject.Organization, []string{"system:nodes"}) {
			t.Errorf("client CSR subject = %v", csr.Subject)
		}

		if client.Spec.Username != "system:bootstrap:"+cl.bundle.Secrets.BootstrapToken[:6] {
			t.Errorf("client CSR requested by %q, want the bootstrap token's user", client.Spec.Username)
		}
	}

	controlPlaneTaint := func(taint corev1.Taint) bool {
		return taint.Key == "node-role.kubernetes.io/control-plane" && taint.Effect == corev1.TaintEffectNoSchedule
	}

	if taints := waitNode(t, ctx, kube, "cp-1").Spec.Taints; !slices.ContainsFunc(taints, controlPlaneTaint) {
		t.Errorf("control plane taints = %v, want node-role.kubernetes.io/control-plane:NoSchedule", taints)
	}

	if taints := waitNode(t, ctx, kube, "worker-1").Spec.Taints; slices.ContainsFunc(taints, controlPlaneTaint) {
		t.Errorf("worker taints = %v, want no control-plane taint", taints)
	}

	// worker-1 asks for a serving certificate exactly as a kubelet does.
	serving := waitCSR(t, ctx, kube, certificatesv1.KubeletServingSignerName, "worker-1", func(*certificatesv1.CertificateSigningRequest) bool { return true })

	if serving.Spec.Username != "system:node:worker-1" || !slices.Contains(serving.Spec.Groups, "system:nodes") {
		t.Errorf("serving CSR requester = %s %v", serving.Spec.Username, serving.Spec.Groups)
	}

	if want := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}; !slices.Equal(serving.Spec.Usages, want) {
		t.Errorf("serving CSR usages = %v, want %v (the kubelet's for an ECDSA key)", serving.Spec.Usages, want)
	}

	req := parseCSR(t, serving)
	if req.Subject.CommonName != "system:node:worker-1" || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) ||
		!slices.Equal(req.DNSNames, []string{"worker-1"}) || len(req.IPAddresses) != 1 || req.IPAddresses[0].String() != "127.0.2.2" ||
		len(req.EmailAddresses) != 0 || len(req.URIs) != 0 {
		t.Errorf("serving CSR = subject %v DNS %v IPs %v emails %v URIs %v", req.Subject, req.DNSNames, req.IPAddresses, req.EmailAddresses, req.URIs)
	}

	// worker-3 runs Talos v1.14, whose kubelet takes serverTLSBootstrap from the KubeletConfig document.
	fromDocument := waitCSR(t, ctx, kube, certificatesv1.KubeletServingSignerName, "worker-3", func(*certificatesv1.CertificateSigningRequest) bool { return true })
	if r := parseCSR(t, fromDocument); !slices.Equal(r.DNSNames, []string{"worker-3"}) || len(r.IPAddresses) != 1 || r.IPAddresses[0].String() != "127.0.2.4" {
		t.Errorf("worker-3 serving CSR SANs = %v %v", r.DNSNames, r.IPAddresses)
	}

	// Until the request is approved, the kubelet has nothing to serve.
	w1Port := waitNode(t, ctx, kube, "worker-1").Status.DaemonEndpoints.KubeletEndpoint.Port
	if _, err := dialKubelet("127.0.2.2", w1Port, cl.bundle.Certs.K8s.Crt, "worker-1"); err == nil {
		t.Error("kubelet served TLS before its serving certificate was issued")
	}

	// Denied: the kubelet retries with a new request after its backoff; with a fault switched on, that
	// request asks for the control plane's name and IP as well.
	if err := w1.SetFaults(Faults{
		KubeletServingExtraIPs:      []netip.Addr{netip.MustParseAddr("127.0.2.1")},
		KubeletServingExtraDNSNames: []string{"cp-1"},
	}); err != nil {
		t.Fatal(err)
	}

	setCSRCondition(t, ctx, kube, serving, certificatesv1.CertificateDenied, "TestDenied")

	retry := waitCSR(t, ctx, kube, certificatesv1.KubeletServingSignerName, "worker-1", func(csr *certificatesv1.CertificateSigningRequest) bool {
		return csr.Name != serving.Name
	})

	if r := parseCSR(t, retry); len(r.IPAddresses) != 2 || r.IPAddresses[1].String() != "127.0.2.1" || !slices.Equal(r.DNSNames, []string{"worker-1", "cp-1"}) {
		t.Errorf("retried serving CSR SANs = %v %v, want the node's plus the injected neighbour's", r.DNSNames, r.IPAddresses)
	}

	// Approved: the controller manager signs it with the cluster CA and the kubelet serves it.
	setCSRCondition(t, ctx, kube, retry, certificatesv1.CertificateApproved, "TestApproved")

	issued := waitCSR(t, ctx, kube, certificatesv1.KubeletServingSignerName, "worker-1", func(csr *certificatesv1.CertificateSigningRequest) bool {
		return csr.Name == retry.Name && len(csr.Status.Certificate) > 0
	})

	var served *stdx509.Certificate

	pollUntil(t, ctx, "worker-1 serving its issued certificate", func() (bool, error) {
		cert, err := dialKubelet("127.0.2.2", w1Port, cl.bundle.Certs.K8s.Crt, "worker-1")
		served = cert

		return err == nil, nil
	})

	block, _ := pem.Decode(issued.Status.Certificate)
	if block == nil || !slices.Equal(block.Bytes, served.Raw) {
		t.Error("kubelet serves a certificate other than the one issued for its request")
	}

	// worker-2 does not bootstrap a serving certificate: it serves a self-signed one, which the cluster CA
	// does not verify, and never asks the API server for one.
	w2Port := waitNode(t, ctx, kube, "worker-2").Status.DaemonEndpoints.KubeletEndpoint.Port

	pollUntil(t, ctx, "worker-2 serving its self-signed certificate", func() (bool, error) {
		_, err := dialKubelet("127.0.2.3", w2Port, cl.bundle.Certs.K8s.Crt, "worker-2")

		var unknown stdx509.UnknownAuthorityError

		return errors.As(err, &unknown), nil
	})

	for _, csr := range listCSRs(t, ctx, kube) {
		if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && csr.Spec.Username == "system:node:worker-2" {
			t.Errorf("worker-2 requested a serving certificate without serverTLSBootstrap: %s", csr.Name)
		}
	}

	// The kubelet's client certificate lives in /var/lib/kubelet: a reboot keeps it (the kubelet
	// registers again without a new request), a reset that wipes EPHEMERAL makes it bootstrap anew.
	w2Admin := certClient(t, w2, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))

	deleteNode(t, ctx, kube, "worker-2")

	if err := w2Admin.Reboot(ctx); err != nil {
		t.Fatalf("Reboot: %v", err)
	}

	waitNode(t, ctx, kube, "worker-2")

	if got := clientCSRs(t, ctx, kube, "worker-2"); got != 1 {
		t.Errorf("client certificate requests of worker-2 after a reboot = %d, want 1", got)
	}

	deleteNode(t, ctx, kube, "worker-2")

	if err := w2Admin.Reset(ctx, false, true); err != nil {
		t.Fatalf("Reset: %v", err)
	}

	if err := w2.WaitPhase(ctx, PhaseMaintenance); err != nil {
		t.Fatal(err)
	}

	if _, err := pinnedClient(t, w2, w2.MaintenanceFingerprint()).ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cl.worker}); err != nil {
		t.Fatalf("ApplyConfiguration after reset: %v", err)
	}

	waitNode(t, ctx, kube, "worker-2")

	if got := clientCSRs(t, ctx, kube, "worker-2"); got != 2 {
		t.Errorf("client certificate requests of worker-2 after a reset = %d, want 2", got)
	}

}

// pollUntil polls cond every 100ms until it holds, failing the test at ctx's deadline.
func pollUntil(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()

	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) { return cond() }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitNode waits for the Node name to be registered and returns it.
func waitNode(t *testing.T, ctx context.Context, kube kubernetes.Interface, name string) *corev1.Node {
	t.Helper()

	var node *corev1.Node

	pollUntil(t, ctx, "node "+name, func() (bool, error) {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		node = n

		return err == nil, nil
	})

	return node
}

// deleteNode deletes a Node as an administrator would.
func deleteNode(t *testing.T, ctx context.Context, kube kubernetes.Interface, name string) {
	t.Helper()

	if err := kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting node %s: %v", name, err)
	}
}

// clientCSRs counts the kubelet client certificate requests for node.
func clientCSRs(t *testing.T, ctx context.Context, kube kubernetes.Interface, node string) int {
	t.Helper()

	count := 0

	for _, csr := range listCSRs(t, ctx, kube) {
		if csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && parseCSR(t, &csr).Subject.CommonName == "system:node:"+node {
			count++
		}
	}

	return count
}

// listCSRs lists every CertificateSigningRequest.
func listCSRs(t *testing.T, ctx context.Context, kube kubernetes.Interface) []certificatesv1.CertificateSigningRequest {
	t.Helper()

	list, err := kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing CSRs: %v", err)
	}

	return list.Items
}

// waitCSR waits for a CSR of signer from system:node:<node> (or, for client certificates, whose subject
// names the node) that satisfies cond.
func waitCSR(t *testing.T, ctx context.Context, kube kubernetes.Interface, signer, node string, cond func(*certificatesv1.CertificateSigningRequest) bool) *certificatesv1.CertificateSigningRequest {
	t.Helper()

	var found *certificatesv1.CertificateSigningRequest

	pollUntil(t, ctx, fmt.Sprintf("a %s CSR of %s", signer, node), func() (bool, error) {
		for _, csr := range listCSRs(t, ctx, kube) {
			if csr.Spec.SignerName == signer && parseCSR(t, &csr).Subject.CommonName == "system:node:"+node && cond(&csr) {
				found = &csr

				return true, nil
			}
		}

		return false, nil
	})

	return found
}

// parseCSR parses a CSR's PKCS#10 request.
func parseCSR(t *testing.T, csr *certificatesv1.CertificateSigningRequest) *stdx509.CertificateRequest {
	t.Helper()

	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil {
		t.Fatalf("CSR %s holds no PEM request", csr.Name)
	}

	req, err := stdx509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatalf("CSR %s: %v", csr.Name, err)
	}

	return req
}

// setCSRCondition approves or denies csr through the approval subresource.
func setCSRCondition(t *testing.T, ctx context.Context, kube kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType, reason string) {
	t.Helper()

	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: "set by the simulator test",
	})

	if _, err := kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("%s %s: %v", typ, csr.Name, err)
	}
}

// dialKubelet connects to a kubelet's HTTPS port verifying it against caPEM for serverName, and returns
// the certificate it served.
func dialKubelet(ip string, port int32, caPEM []byte, serverName string) (*stdx509.Certificate, error) {
	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", net.JoinHostPort(ip, strconv.Itoa(int(port))),
		&tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}

	defer conn.Close() //nolint:errcheck

	return conn.ConnectionState().PeerCertificates[0], nil
}

// checkControlPlaneKeys checks that the control plane uses the machine config's keys beyond the cluster
// CA (which every client here verifies against): the aggregation layer trusts cluster.aggregatorCA, and
// service-account tokens are signed with cluster.serviceAccount's key (their key ID is the hash of its
// public key).
func checkControlPlaneKeys(t *testing.T, ctx context.Context, kube kubernetes.Interface, cl *testCluster) {
	t.Helper()

	auth, err := kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the aggregation layer's trust: %v", err)
	}

	if got, want := strings.TrimSpace(auth.Data["requestheader-client-ca-file"]), strings.TrimSpace(string(cl.bundle.Certs.K8sAggregator.Crt)); got != want {
		t.Errorf("requestheader client CA is not cluster.aggregatorCA:\n%s", got)
	}

	sa, err := kube.CoreV1().ServiceAccounts(metav1.NamespaceSystem).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	tr, err := kube.CoreV1().ServiceAccounts(metav1.NamespaceSystem).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request: %v", err)
	}

	header, _, _ := strings.Cut(tr.Status.Token, ".")

	headerJSON, err := base64.RawURLEncoding.DecodeString(header)
	if err != nil {
		t.Fatal(err)
	}

	var jose struct {
		KeyID string `json:"kid"`
	}

	if err = json.Unmarshal(headerJSON, &jose); err != nil {
		t.Fatal(err)
	}

	key, err := keyutil.ParsePrivateKeyPEM(cl.bundle.Certs.K8sServiceAccount.Key)
	if err != nil {
		t.Fatalf("cluster.serviceAccount key: %v", err)
	}

	der, err := stdx509.MarshalPKIXPublicKey(key.(crypto.Signer).Public())
	if err != nil {
		t.Fatal(err)
	}

	sum := sha256.Sum256(der)
	if want := base64.RawURLEncoding.EncodeToString(sum[:]); jose.KeyID != want {
		t.Errorf("service-account token key ID = %q, want %q (cluster.serviceAccount's key)", jose.KeyID, want)
	}
}
