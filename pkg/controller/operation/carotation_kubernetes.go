package operation

import (
	"context"
	stdx509 "crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// followKubernetesCA checks the node runs the Kubernetes CAs in force (its
// running config's cluster.ca and cluster.acceptedCAs, which its kubelet,
// and on a control plane kube-apiserver and the controller manager, run
// with), and that the cluster's Kubernetes API answers a client
// certificate from next, trusting only the CAs in force, with every Node
// Ready: what talosctl rotate-ca checks between phases.
func (s *step) followKubernetesCA(ctx context.Context, next *x509.PEMEncodedCertificateAndKey) (done, waiting string, _ error) {
	data, err := s.node.Config(ctx)
	if err != nil {
		return "", fmt.Sprintf("the node's Talos API does not answer: %v", err), nil
	}
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return "", fmt.Sprintf("the node's running config does not parse: %v", err), nil
	}
	// cluster.ca and cluster.acceptedCAs, or the KubeAPIServerCAConfig
	// document from the v1.14 contract on. The accepted ones begin with the
	// issuing one, which only a control plane holds with its key.
	cas := cfg.K8sAPIServerCAConfig()
	if cas == nil || len(cas.AcceptedCAs()) == 0 {
		return "", "the node's running config has no Kubernetes CA", nil
	}
	got := &talos.TalosCA{}
	for _, ca := range cas.AcceptedCAs() {
		got.Accepted = append(got.Accepted, ca.Crt)
	}
	got.Issuing = got.Accepted[0]
	if msg := casDiffer(got, s.bundle.Certs.K8s.Crt, s.bundle.KubernetesAccepted); msg != "" {
		return "", "Kubernetes CAs: " + msg, nil
	}
	kube, err := s.kubeAs(next)
	if err != nil {
		return "", "", err
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Sprintf("the Kubernetes API does not answer a client certificate from the new Kubernetes CA yet: %v", err), nil
	}
	var notReady []string
	for i := range nodes.Items {
		if !workload.NodeReady(&nodes.Items[i]) {
			notReady = append(notReady, nodes.Items[i].Name)
		}
	}
	if len(notReady) > 0 {
		return "", fmt.Sprintf("Nodes not Ready: %s", strings.Join(notReady, ", ")), nil
	}
	said := fmt.Sprintf("Kubernetes CAs of the phase; the Kubernetes API answers a client certificate from the new CA, %d Nodes Ready", len(nodes.Items))
	if r := s.cluster.Status.CARotation; r != nil && r.Phase == v1alpha1.CARotationDropOld && s.m != nil && s.m.Status.NodeName != "" {
		node := s.m.Status.NodeName
		requested, ok, err := kubeletCertifiedBy(ctx, kube, node, next.Crt)
		if err != nil {
			return "", fmt.Sprintf("listing the kubelets' client certificate requests: %v", err), nil
		}
		if !ok {
			return "", fmt.Sprintf("the kubelet of Node %s has no client certificate from the new Kubernetes CA yet: "+
				"it bootstraps one when it restarts without the old CA", node), nil
		}
		// Issued is not held: the kubelet fetches its certificate with the
		// bootstrap token, which the rotation's end disables. A Node status
		// it reported since it asked is one it reported with the new
		// certificate (the old CA is refused in this phase).
		if reported := readyHeartbeat(nodes.Items, node); reported.Before(requested) {
			return "", fmt.Sprintf("the kubelet of Node %s was issued a client certificate from the new Kubernetes CA "+
				"(requested %s) and has not reported with it yet (last at %s)", node,
				requested.UTC().Format(time.RFC3339), reported.UTC().Format(time.RFC3339)), nil
		}
		said += ", its kubelet holding a client certificate from the new CA"
	}
	return said, "", nil
}

// readyHeartbeat is when node's kubelet last reported its Node Ready; zero
// when it never did.
func readyHeartbeat(nodes []corev1.Node, node string) time.Time {
	for i := range nodes {
		if nodes[i].Name != node {
			continue
		}
		for _, c := range nodes[i].Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return c.LastHeartbeatTime.Time
			}
		}
	}
	return time.Time{}
}

// kubeletCertifiedBy reports whether node's kubelet was issued a client
// certificate that ca verifies: a request of the kubelet client signer
// whose issued certificate names system:node:<node>. requested is when the
// newest such request was made.
func kubeletCertifiedBy(ctx context.Context, kube kubernetes.Interface, node string, ca []byte) (requested time.Time, ok bool, _ error) {
	csrs, err := kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.signerName", certificatesv1.KubeAPIServerClientKubeletSignerName).String(),
	})
	if err != nil {
		return time.Time{}, false, err
	}
	roots := stdx509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	for _, csr := range csrs.Items {
		block, _ := pem.Decode(csr.Status.Certificate)
		if block == nil {
			continue
		}
		cert, err := stdx509.ParseCertificate(block.Bytes)
		if err != nil || cert.Subject.CommonName != "system:node:"+node {
			continue
		}
		if _, err := cert.Verify(stdx509.VerifyOptions{Roots: roots, KeyUsages: []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}}); err == nil {
			ok = true
			if csr.CreationTimestamp.After(requested) {
				requested = csr.CreationTimestamp.Time
			}
		}
	}
	return requested, ok, nil
}

// kubeAs is a client of the cluster's Kubernetes API with a certificate
// from ca, as ichor-controller, trusting every Kubernetes CA in force.
func (s *step) kubeAs(ca *x509.PEMEncodedCertificateAndKey) (kubernetes.Interface, error) {
	signer := &secrets.Bundle{Certs: &secrets.Certs{K8s: ca}}
	if s.r.Workload != nil {
		return s.r.Workload(signer, s.cluster.Spec.ControlPlane.Endpoint)
	}
	cfg, err := workload.ClientConfig(signer, s.cluster.Spec.ControlPlane.Endpoint, workload.Controller, s.r.Now(), time.Minute, s.bundle.KubernetesCA())
	if err != nil {
		return nil, err
	}
	cfg.Timeout = s.r.Options.CallTimeout
	return kubernetes.NewForConfig(cfg)
}
