package talossim

import (
	"archive/tar"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/siderolabs/talos/pkg/machinery/role"
)

func TestKubeconfig(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})
	clients := roleClients(t, n, cl)

	for _, r := range []role.Role{role.Operator, role.Reader, role.EtcdBackup} {
		_, err := clients[r].Kubeconfig(ctx)
		wantDenied(t, err)
	}

	// The raw stream is a .tar.gz holding exactly one file, kubeconfig, mode 0600.
	raw, err := admin.KubeconfigRaw(ctx)
	if err != nil {
		t.Fatalf("KubeconfigRaw: %v", err)
	}

	zr, err := gzip.NewReader(raw)
	if err != nil {
		t.Fatalf("gzip: %v", err)
	}

	tr := tar.NewReader(zr)

	hdr, err := tr.Next()
	if err != nil || hdr.Name != "kubeconfig" || hdr.Mode != 0o600 || hdr.Typeflag != tar.TypeReg {
		t.Fatalf("tar entry = %+v, %v", hdr, err)
	}

	if _, err = io.Copy(io.Discard, tr); err != nil {
		t.Fatal(err)
	}

	if _, err = tr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("second tar entry: %v", err)
	}

	raw.Close() //nolint:errcheck

	// The client helper untars it; client-go parses it.
	b, err := admin.Kubeconfig(ctx)
	if err != nil {
		t.Fatalf("Kubeconfig: %v", err)
	}

	kc, err := clientcmd.Load(b)
	if err != nil {
		t.Fatalf("clientcmd.Load: %v", err)
	}

	cfg := loadConfig(t, cl.cp)

	kctx := kc.Contexts[kc.CurrentContext]
	if kc.CurrentContext != "admin@sim" || kctx == nil || kctx.Cluster != "sim" || kctx.AuthInfo != "admin@sim" || kctx.Namespace != "default" {
		t.Fatalf("context %q = %+v", kc.CurrentContext, kctx)
	}

	cluster := kc.Clusters["sim"]
	if cluster == nil || cluster.Server != cfg.K8sClusterConfig().ClusterEndpoint().String() || cluster.Server != "https://127.0.0.1:6443" {
		t.Fatalf("cluster = %+v", cluster)
	}

	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cfg.K8sAPIServerCAConfig().IssuingCA().Crt) {
		t.Fatal("parsing the config's Kubernetes CA")
	}

	serverCAs := x509.NewCertPool()
	if !serverCAs.AppendCertsFromPEM(cluster.CertificateAuthorityData) || !serverCAs.Equal(roots) {
		t.Fatal("the kubeconfig's server CA is not the cluster CA")
	}

	user := kc.AuthInfos["admin@sim"]
	if user == nil {
		t.Fatalf("no admin@sim user in %v", kc.AuthInfos)
	}

	if _, err = tls.X509KeyPair(user.ClientCertificateData, user.ClientKeyData); err != nil {
		t.Fatalf("client certificate and key do not match: %v", err)
	}

	block, _ := pem.Decode(user.ClientCertificateData)
	if block == nil {
		t.Fatal("client certificate is not PEM")
	}

	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	if _, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("client certificate does not chain to the Kubernetes CA: %v", err)
	}

	if cert.Subject.CommonName != "admin" || !slices.Equal(cert.Subject.Organization, []string{"system:masters"}) ||
		cert.NotAfter.Before(time.Now().Add(300*24*time.Hour)) {
		t.Fatalf("client certificate subject %v, expires %s", cert.Subject, cert.NotAfter)
	}

	if _, err = clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig(); err != nil {
		t.Fatalf("building a REST config: %v", err)
	}
}
