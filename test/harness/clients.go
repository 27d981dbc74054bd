package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"ichor.dev/ichor/pkg/pki"
)

// ConfigFor returns a client configuration that impersonates user in groups,
// through the admin identity, as `kubectl --as --as-group` does.
func (cp *ControlPlane) ConfigFor(user string, groups ...string) *rest.Config {
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:authenticated"}, groups...)}
	return cfg
}

// KubeconfigFor writes a kubeconfig to path whose requests the admin
// identity makes as user in groups (ConfigFor as a file), for a component
// run as a process under its ServiceAccount's RBAC.
func (cp *ControlPlane) KubeconfigFor(path, user string, groups ...string) error {
	cfg, err := clientcmd.LoadFromFile(cp.AdminKubeconfig)
	if err != nil {
		return err
	}
	for _, u := range cfg.AuthInfos {
		u.Impersonate = user
		u.ImpersonateGroups = append([]string{"system:authenticated"}, groups...)
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// KubectlError is a failed kubectl run with what it printed.
type KubectlError struct {
	Args   []string
	Err    error
	Stderr string
}

func (e *KubectlError) Error() string {
	return fmt.Sprintf("kubectl %v: %v: %s", e.Args, e.Err, e.Stderr)
}

// Kubectl runs the kubectl built with the control plane as the admin and
// returns its standard output; a failure is a *KubectlError with stderr.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	return cp.KubectlWithInput(ctx, nil, args...)
}

// KubectlWithInput is Kubectl with stdin.
func (cp *ControlPlane) KubectlWithInput(ctx context.Context, stdin []byte, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, cp.bin("kubectl"), append([]string{"--kubeconfig=" + cp.AdminKubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	// kubectl keeps a discovery cache; a private one per control plane keeps runs independent.
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+cp.Dir+"/kubectl-cache")
	if err := cmd.Run(); err != nil {
		return stdout.String(), &KubectlError{Args: args, Err: err, Stderr: stderr.String()}
	}
	return stdout.String(), nil
}

func writeKubeconfig(path, server, caFile, certFile, keyFile string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["ichor"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts["ichor"] = &clientcmdapi.Context{Cluster: "ichor", AuthInfo: "user"}
	cfg.CurrentContext = "ichor"
	return path, clientcmd.WriteToFile(*cfg, path)
}

// tlsClient is an HTTP client trusting caFile, with an optional client certificate.
func tlsClient(caFile, certFile, keyFile string) (*http.Client, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}

// Namespace creates a namespace for one test and deletes it when the test ends.
func (cp *ControlPlane) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	created, err := cp.kubeClient.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create test namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = cp.kubeClient.CoreV1().Namespaces().Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})
	return created.Name
}

// IchorAdminConfig is AdminConfig aimed at ichor-apiserver itself instead of
// kube-apiserver, for what only that server answers (its /debug/pprof). It
// authenticates with the admin's client certificate, which ichor-apiserver
// accepts from kube-apiserver's client CA, as it accepts kubectl's.
func (cp *ControlPlane) IchorAdminConfig() *rest.Config {
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.Host = cp.IchorURL
	cfg.CAFile, cfg.CAData = "", cp.ichorCA
	return cfg
}

// IchorDirectConfigFor is a client of ichor-apiserver itself, not through
// kube-apiserver, with a client certificate the cluster's client CA issued
// for user in groups (its common name and organizations): what someone who
// reaches ichor-apiserver's Service with such a certificate can present.
func (cp *ControlPlane) IchorDirectConfigFor(user string, groups ...string) (*rest.Config, error) {
	kp, err := cp.files.clientIssuer.Issue(pki.Leaf{CommonName: user, Organizations: groups, Usage: pki.ClientAuth})
	if err != nil {
		return nil, err
	}
	return &rest.Config{Host: cp.IchorURL, TLSClientConfig: rest.TLSClientConfig{CAData: cp.ichorCA, CertData: kp.CertPEM, KeyData: kp.KeyPEM}}, nil
}
