package talossim

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	stdx509 "crypto/x509"
	"fmt"
	"time"

	"github.com/siderolabs/crypto/x509"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
)

// kubeconfigClockSkew backdates the admin certificate like Talos does, for clocks slightly behind.
const kubeconfigClockSkew = 10 * time.Second

// Kubeconfig sends the admin kubeconfig of a control plane as Talos does: one message holding a .tar.gz
// with a single file "kubeconfig" (mode 0600), whose client certificate (cluster.adminKubeconfig names,
// by default CN admin, O system:masters) is signed by the config's Kubernetes CA.
func (s *machineServer) Kubeconfig(_ *emptypb.Empty, srv machine.MachineService_KubeconfigServer) error {
	n := s.node

	if err := n.checkControlplane(srv.Context(), "kubeconfig"); err != nil {
		return err
	}

	n.mu.Lock()
	cfg := n.active
	n.mu.Unlock()

	if cfg == nil || cfg.Cluster() == nil {
		return status.Error(codes.FailedPrecondition, "machine config has no cluster section")
	}

	kubeconfig, err := adminKubeconfig(cfg, time.Now())
	if err != nil {
		return err
	}

	archive, err := singleFileTarGz("kubeconfig", kubeconfig, 0o600)
	if err != nil {
		return err
	}

	return srv.Send(&common.Data{Bytes: archive})
}

// adminKubeconfig renders the admin kubeconfig of cfg's cluster: context and user "admin@<cluster>",
// the cluster endpoint, and the accepted plus issuing CAs as the server CA bundle.
func adminKubeconfig(cfg talosconfig.Config, now time.Time) ([]byte, error) {
	issuing := k8sIssuingCA(cfg)
	if issuing == nil || len(issuing.Key) == 0 {
		return nil, fmt.Errorf("error getting Kubernetes CA: cluster.ca has no key")
	}

	endpoint := clusterEndpoint(cfg)
	if endpoint == nil || cfg.Cluster() == nil {
		return nil, fmt.Errorf("machine config has no cluster endpoint")
	}

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(issuing)
	if err != nil {
		return nil, fmt.Errorf("error getting Kubernetes CA: %w", err)
	}

	admin := cfg.Cluster().AdminKubeconfig()

	kp, err := x509.NewKeyPair(ca,
		x509.CommonName(admin.CommonName()),
		x509.Organization(admin.CertOrganization()),
		x509.NotBefore(now.Add(-kubeconfigClockSkew)),
		x509.NotAfter(now.Add(admin.CertLifetime())),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
	)
	if err != nil {
		return nil, fmt.Errorf("error generating Kubernetes client certificate: %w", err)
	}

	cert := x509.NewCertificateAndKeyFromKeyPair(kp)

	var serverCAs []byte
	for _, accepted := range k8sOtherAcceptedCAs(cfg) {
		serverCAs = append(serverCAs, accepted.Crt...)
	}

	serverCAs = append(serverCAs, issuing.Crt...)

	name := clusterName(cfg)
	user := "admin@" + name

	return clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: {Server: endpoint.String(), CertificateAuthorityData: serverCAs}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{user: {ClientCertificateData: cert.Crt, ClientKeyData: cert.Key}},
		Contexts:       map[string]*clientcmdapi.Context{user: {Cluster: name, Namespace: "default", AuthInfo: user}},
		CurrentContext: user,
	})
}

// singleFileTarGz packs data as the only regular file of a gzipped tar archive.
func singleFileTarGz(name string, data []byte, mode int64) ([]byte, error) {
	var buf bytes.Buffer

	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)

	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(data)), Mode: mode, ModTime: time.Now()}); err != nil {
		return nil, err
	}

	if _, err := tw.Write(data); err != nil {
		return nil, err
	}

	if err := tw.Close(); err != nil {
		return nil, err
	}

	if err := zw.Close(); err != nil {
		return nil, err
	}

	return buf.Bytes(), nil
}
