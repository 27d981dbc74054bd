package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"ichor.dev/ichor/pkg/pki"
)

// Identities the harness issues client certificates for.
const (
	adminUser        = "ichor-test-admin"
	frontProxyClient = "front-proxy-client"
	// IchorNamespace and IchorServiceAccount are where artifacts/ installs ichor-apiserver.
	IchorNamespace        = "ichor-system"
	IchorServiceAccount   = "ichor-apiserver"
	ichorServiceName      = "ichor-apiserver"
	controllerServiceName = "ichor-controller"
)

// files are the paths of every credential the control plane uses.
type files struct {
	etcdCA, etcdServerCert, etcdServerKey, etcdClientCert, etcdClientKey string
	kubeCA, kubeServingCert, kubeServingKey                              string
	clientCA, clientCAKey                                                string
	frontProxyCA, frontProxyCert, frontProxyKey                          string
	saKey, saPub                                                         string
	ichorCA, ichorServingCert, ichorServingKey                           string
	adminCert, adminKey, ichorClientCert, ichorClientKey                 string
	controllerCA, controllerServingCert, controllerServingKey            string
	// issuersCA issued the serving certificates of ichor-auth and of the
	// OpenID provider, which kube-apiserver's authentication configuration trusts.
	issuersCA, authServingCert, authServingKey, oidcServingCert, oidcServingKey string
	// clientIssuer is the client CA itself, for ClientCertificateConfig.
	clientIssuer *pki.CA
}

// writePKI generates every CA and certificate of a test control plane in
// dir; kube-apiserver's serves kubernetesIP too, the kubernetes Service's
// cluster IP, which in-cluster clients dial.
func writePKI(dir string, kubernetesIP netip.Addr) (files, []byte, error) {
	var f files
	var ichorCAPEM []byte
	write := func(ca *pki.CA, name string) (string, error) {
		path := filepath.Join(dir, name+".crt")
		return path, os.WriteFile(path, ca.CertPEM(), 0o644)
	}
	issue := func(ca *pki.CA, name string, leaf pki.Leaf) (string, string, error) {
		kp, err := ca.Issue(leaf)
		if err != nil {
			return "", "", err
		}
		return kp.WriteFiles(dir, name)
	}
	serving := pki.Leaf{DNSNames: pki.Loopback.DNSNames, IPs: pki.Loopback.IPs, Usage: pki.ServerAuth}

	steps := []func() error{
		func() error {
			ca, err := pki.NewCA("etcd-ca")
			if err != nil {
				return err
			}
			if f.etcdCA, err = write(ca, "etcd-ca"); err != nil {
				return err
			}
			leaf := serving
			leaf.CommonName, leaf.Usage = "etcd", pki.ServerAuth|pki.ClientAuth
			if f.etcdServerCert, f.etcdServerKey, err = issue(ca, "etcd-server", leaf); err != nil {
				return err
			}
			f.etcdClientCert, f.etcdClientKey, err = issue(ca, "etcd-client", pki.Leaf{CommonName: "etcd-client", Usage: pki.ClientAuth})
			return err
		},
		func() error {
			ca, err := pki.NewCA("kubernetes-ca")
			if err != nil {
				return err
			}
			if f.kubeCA, err = write(ca, "kubernetes-ca"); err != nil {
				return err
			}
			leaf := serving
			leaf.CommonName = "kube-apiserver"
			leaf.DNSNames = append(leaf.DNSNames, "kubernetes", "kubernetes.default", "kubernetes.default.svc")
			leaf.IPs = append(slices.Clone(leaf.IPs), kubernetesIP.AsSlice())
			f.kubeServingCert, f.kubeServingKey, err = issue(ca, "kube-apiserver", leaf)
			return err
		},
		func() error {
			ca, err := pki.NewCA("client-ca")
			if err != nil {
				return err
			}
			if f.clientCA, err = write(ca, "client-ca"); err != nil {
				return err
			}
			f.clientIssuer = ca
			kp, err := ca.KeyPair()
			if err != nil {
				return err
			}
			if _, f.clientCAKey, err = kp.WriteFiles(dir, "client-ca-signer"); err != nil {
				return err
			}
			if f.adminCert, f.adminKey, err = issue(ca, "admin", pki.Leaf{CommonName: adminUser, Organizations: []string{"system:masters"}, Usage: pki.ClientAuth}); err != nil {
				return err
			}
			f.ichorClientCert, f.ichorClientKey, err = issue(ca, "ichor-apiserver-client", pki.Leaf{
				CommonName:    "system:serviceaccount:" + IchorNamespace + ":" + IchorServiceAccount,
				Organizations: []string{"system:serviceaccounts", "system:serviceaccounts:" + IchorNamespace},
				Usage:         pki.ClientAuth,
			})
			return err
		},
		func() error {
			ca, err := pki.NewCA("front-proxy-ca")
			if err != nil {
				return err
			}
			if f.frontProxyCA, err = write(ca, "front-proxy-ca"); err != nil {
				return err
			}
			f.frontProxyCert, f.frontProxyKey, err = issue(ca, "front-proxy-client", pki.Leaf{CommonName: frontProxyClient, Usage: pki.ClientAuth})
			return err
		},
		func() error {
			ca, err := pki.NewCA("ichor-apiserver-ca")
			if err != nil {
				return err
			}
			ichorCAPEM = ca.CertPEM()
			if f.ichorCA, err = write(ca, "ichor-apiserver-ca"); err != nil {
				return err
			}
			leaf := serving
			leaf.CommonName = ichorServiceName
			leaf.DNSNames = append(leaf.DNSNames, ichorServiceName+"."+IchorNamespace+".svc")
			f.ichorServingCert, f.ichorServingKey, err = issue(ca, "ichor-apiserver", leaf)
			return err
		},
		func() error {
			ca, err := pki.NewCA("ichor-controller-ca")
			if err != nil {
				return err
			}
			if f.controllerCA, err = write(ca, "ichor-controller-ca"); err != nil {
				return err
			}
			leaf := serving
			leaf.CommonName = controllerServiceName
			leaf.DNSNames = append(leaf.DNSNames, controllerServiceName+"."+IchorNamespace+".svc")
			f.controllerServingCert, f.controllerServingKey, err = issue(ca, "ichor-controller-upload", leaf)
			return err
		},
		func() error {
			ca, err := pki.NewCA("ichor-issuers-ca")
			if err != nil {
				return err
			}
			if f.issuersCA, err = write(ca, "ichor-issuers-ca"); err != nil {
				return err
			}
			leaf := serving
			leaf.CommonName = "ichor-auth"
			if f.authServingCert, f.authServingKey, err = issue(ca, "ichor-auth", leaf); err != nil {
				return err
			}
			leaf.CommonName = "oidc-provider"
			f.oidcServingCert, f.oidcServingKey, err = issue(ca, "oidc-provider", leaf)
			return err
		},
		func() error {
			key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				return err
			}
			der, err := x509.MarshalPKCS8PrivateKey(key)
			if err != nil {
				return err
			}
			f.saKey = filepath.Join(dir, "service-account.key")
			if err := os.WriteFile(f.saKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
				return err
			}
			pub, err := x509.MarshalPKIXPublicKey(key.Public())
			if err != nil {
				return err
			}
			f.saPub = filepath.Join(dir, "service-account.pub")
			return os.WriteFile(f.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return f, nil, err
		}
	}
	return f, ichorCAPEM, nil
}
