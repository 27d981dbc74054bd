package download

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// credentials streams GET talosclusters/NAME/credentials: after a CA
// rotation completed, the cluster's new admin credentials, once, as a zip
// archive of a talosconfig (os:admin, for the control planes) and a
// kubeconfig (system:masters, for the cluster's endpoint), both from one
// key made for this download and valid for an hour. Before any rotation,
// and once they were taken, it is a 409 that says why. The archive is made
// when the response reads it: the controller marks the credentials served
// as it issues them, so two downloads at once get them once.
func credentials(ctx context.Context, r request[*ichor.TalosCluster, *ichor.DownloadOptions]) (string, opener, error) {
	cluster := r.object
	name := cluster.Name
	conflict := func(format string, args ...any) error {
		return apierrors.NewConflict(ichor.Resource("talosclusters/credentials"), name, fmt.Errorf(format, args...))
	}
	switch c := cluster.Status.Credentials; {
	case c == nil:
		return "", nil, conflict("no CA rotation of TalosCluster %s has completed: there are no new admin credentials to hand out "+
			"(a ca-rotation TalosOperation makes them; until then admins reach the cluster with `ichor break-glass` or their own sign-in)", name)
	case c.ServedAt != nil:
		return "", nil, conflict("the new admin credentials of TalosOperation %s (completed %s) were downloaded by %s at %s; they are served once",
			c.Rotation, c.RotatedAt.UTC().Format(time.RFC3339), c.ServedTo, c.ServedAt.UTC().Format(time.RFC3339))
	case cluster.Status.KubernetesCA == "":
		return "", nil, conflict("TalosCluster %s does not show its Kubernetes CA yet (status.kubernetesCA), which the kubeconfig trusts", name)
	}
	endpoints, err := r.controlPlaneEndpoints(ctx, cluster)
	if err != nil {
		return "", nil, err
	}
	what := fmt.Sprintf("the new admin credentials of TalosCluster %s", name)
	return what, func(ctx context.Context) (*opened, error) {
		issued, err := r.Credentials.Request(ctx, cluster.Namespace, cluster.Name, nil, v1alpha1.PurposeCredentials)
		if err != nil {
			return nil, err
		}
		if len(issued.KubernetesCertificate) == 0 {
			return nil, errors.New("the controller issued no Kubernetes certificate with the admin credentials")
		}
		data, err := credentialsArchive(cluster, endpoints, issued)
		if err != nil {
			return nil, err
		}
		return &opened{body: io.NopCloser(bytes.NewReader(data)), credential: issued.Request}, nil
	}, nil
}

// credentialsArchive is the zip of the talosconfig and the kubeconfig.
func credentialsArchive(cluster *ichor.TalosCluster, endpoints []string, issued Issued) ([]byte, error) {
	name := cluster.Namespace + "/" + cluster.Name
	talosconfig, err := clientconfig.NewConfig(name+"-admin", endpoints, issued.CA,
		&x509.PEMEncodedCertificateAndKey{Crt: issued.Certificate, Key: issued.Key}).Bytes()
	if err != nil {
		return nil, fmt.Errorf("encode the talosconfig of TalosCluster %s: %w", name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cluster.Spec.ControlPlane.Endpoint, CertificateAuthorityData: []byte(cluster.Status.KubernetesCA)}
	kc.AuthInfos["admin@"+name] = &clientcmdapi.AuthInfo{ClientCertificateData: issued.KubernetesCertificate, ClientKeyData: issued.Key}
	kc.Contexts["admin@"+name] = &clientcmdapi.Context{Cluster: name, AuthInfo: "admin@" + name}
	kc.CurrentContext = "admin@" + name
	kubeconfig, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("encode the kubeconfig of TalosCluster %s: %w", name, err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{{"talosconfig", talosconfig}, {"kubeconfig", kubeconfig}} {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: time.Now()}
		h.SetMode(0o600) // each holds the key
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
