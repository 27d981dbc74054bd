package talossim

import (
	"bytes"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/pem"
	"net/url"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestTalosctlRotateKubernetesCA runs the official talosctl v1.13 rotate-ca for the Kubernetes CA
// against a control plane with a real kube-apiserver: it reads the current CA from the node's
// KubernetesRoot, makes a new CA accepted, then issuing with the old one accepted, then drops the old
// one, each a NO_REBOOT apply after which it waits for the kubelet service to restart, and checks the
// cluster's Nodes are Ready through the Kubernetes API with each phase's kubeconfig. Afterwards
// kube-apiserver serves a certificate from the new CA, a client certificate from the old CA is
// refused, the kubelet bootstrapped a new client certificate from the new CA, and etcd's data stayed.
// (One node: the simulator's apid does not proxy to other nodes.)
func TestTalosctlRotateKubernetesCA(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	ctx, cl, cp, admin, kube := bootstrappedControlPlane(t, "127.0.2.45")
	endpoint := loadConfig(t, cl.cp).K8sClusterConfig().ClusterEndpoint().String()
	oldCA := cl.bundle.Certs.K8s.Crt

	waitNode(t, ctx, kube, "cp-1")
	pollUntil(t, ctx, "the kubelet's first client certificate", func() (bool, error) {
		return clientCSRs(t, ctx, kube, "cp-1") == 1, nil
	})

	if _, err := kube.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"from": "before the rotation"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// KubernetesRoot is os:admin's alone, as on a real node.
	reader := certClient(t, cp, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Reader))
	if _, err := safe.StateGetByID[*secrets.KubernetesRoot](ctx, reader.COSI, secrets.KubernetesRootID); err == nil ||
		!strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("a reader's KubernetesRoot get: %v", err)
	}

	root, err := safe.StateGetByID[*secrets.KubernetesRoot](ctx, admin.COSI, secrets.KubernetesRootID)
	if err != nil {
		t.Fatalf("KubernetesRoot: %v", err)
	}

	if spec := root.TypedSpec(); !bytes.Equal(spec.IssuingCA.Crt, oldCA) || len(spec.AcceptedCAs) != 1 || spec.Endpoint.String() != endpoint {
		t.Fatalf("KubernetesRoot before the rotation: issuing CA %v, %d accepted, endpoint %s", bytes.Equal(spec.IssuingCA.Crt, oldCA), len(spec.AcceptedCAs), spec.Endpoint)
	}

	talosconfig := writeTalosconfig(t, cp, cl, role.Admin)
	r := runTalosctl(t, bin, "", "--talosconfig", talosconfig, "--nodes", "127.0.2.45", "rotate-ca", "--talos=false", "--kubernetes=true",
		"--dry-run=false", "--control-plane-nodes", "127.0.2.45", "--k8s-endpoint", endpoint).mustSucceed(t)
	for _, step := range []string{
		"Adding new Kubernetes CA as accepted",
		"Making new Kubernetes CA the issuing CA, old Kubernetes CA the accepted CA",
		"Verifying connectivity with new PKI",
		"Removing old Kubernetes CA from the accepted CAs",
	} {
		wantLine(t, r, r.stdout, step)
	}

	root, err = safe.StateGetByID[*secrets.KubernetesRoot](ctx, admin.COSI, secrets.KubernetesRootID)
	if err != nil {
		t.Fatal(err)
	}

	// talosctl waits for the kubelet, not for the static pods: kube-apiserver restarts with each
	// phase's certificates in the background, as on Talos.
	pollUntil(t, ctx, "kube-apiserver to run the last phase", func() (bool, error) { return cp.apiServerSettled(), nil })

	newCA := root.TypedSpec().IssuingCA.Crt
	if bytes.Equal(newCA, oldCA) || len(root.TypedSpec().AcceptedCAs) != 1 || !bytes.Equal(root.TypedSpec().AcceptedCAs[0].Crt, newCA) {
		t.Fatal("KubernetesRoot after the rotation: want the new CA issuing and alone accepted")
	}

	// kube-apiserver serves a certificate of the new CA, not of the old one.
	host := mustURL(t, endpoint).Host
	if err := dialVerified(host, newCA); err != nil {
		t.Errorf("kube-apiserver's certificate against the new CA: %v", err)
	}

	if err := dialVerified(host, oldCA); err == nil {
		t.Error("kube-apiserver's certificate still verifies against the old CA")
	}

	// A client certificate of the old CA is refused; the new admin kubeconfig works.
	oldClient := roleKubeconfig(t, endpoint, newCA, cl.bundle.Certs.K8s.Crt, cl.bundle.Certs.K8s.Key)
	if _, err := oldClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("a client certificate of the old CA: %v, want Unauthorized", err)
	}

	rc, err := cp.opts.Kubernetes.WaitReady(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}

	kube = kubernetes.NewForConfigOrDie(rc)

	if cm, err := kube.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kept", metav1.GetOptions{}); err != nil || cm.Data["from"] != "before the rotation" {
		t.Errorf("etcd's data after the rotation: %v", err)
	}

	// The kubelet's client certificate of the old CA no longer verified when the old CA went: it
	// bootstrapped a new one, issued by the new CA.
	pollUntil(t, ctx, "the kubelet's client certificate of the new CA", func() (bool, error) {
		csrs, err := kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // kube-apiserver restarting
		}

		for _, csr := range csrs.Items {
			if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || len(csr.Status.Certificate) == 0 {
				continue
			}

			if issuedBy(csr.Status.Certificate, newCA) {
				return true, nil
			}
		}

		return false, nil
	})

	if node := waitNode(t, ctx, kube, "cp-1"); !nodeReady(node) {
		t.Errorf("cp-1 is not Ready after the rotation: %+v", node.Status.Conditions)
	}
}

// dialVerified dials addr with TLS, trusting caPEM alone.
func dialVerified(addr string, caPEM []byte) error {
	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		return err
	}

	return conn.Close()
}

// roleKubeconfig is a client of endpoint trusting caPEM, with a client certificate of the CA whose
// certificate and key are given, as system:masters.
func roleKubeconfig(t *testing.T, endpoint string, caPEM, issuerCrt, issuerKey []byte) kubernetes.Interface {
	t.Helper()

	crt, key := issueClientCert(t, issuerCrt, issuerKey, "old-admin", "system:masters")

	return kubernetes.NewForConfigOrDie(&rest.Config{Host: endpoint, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM, CertData: crt, KeyData: key}})
}

// issueClientCert issues a client certificate for cn in groups from the CA whose certificate and key
// are given.
func issueClientCert(t *testing.T, caCrt, caKey []byte, cn string, groups ...string) (crt, key []byte) {
	t.Helper()

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(&x509.PEMEncodedCertificateAndKey{Crt: caCrt, Key: caKey})
	if err != nil {
		t.Fatal(err)
	}

	kp, err := x509.NewKeyPair(ca, clientCert(cn, groups...)...)
	if err != nil {
		t.Fatal(err)
	}

	return kp.CrtPEM, kp.KeyPEM
}

// issuedBy reports whether the PEM certificate crt verifies against caPEM.
func issuedBy(crt, caPEM []byte) bool {
	block, _ := pem.Decode(crt)
	if block == nil {
		return false
	}

	cert, err := stdx509.ParseCertificate(block.Bytes)
	if err != nil {
		return false
	}

	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	_, err = cert.Verify(stdx509.VerifyOptions{Roots: pool, KeyUsages: []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageAny}})

	return err == nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()

	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}

	return u
}
