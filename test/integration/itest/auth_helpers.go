package itest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	authcmd "ichor.dev/ichor/pkg/cmd/auth"
	"ichor.dev/ichor/test/harness"
)

// ichor-auth's ServiceAccount, as artifacts/auth-rbac.yaml names it.
var (
	AuthUser   = "system:serviceaccount:" + harness.IchorNamespace + ":ichor-auth"
	AuthGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + harness.IchorNamespace}
)

// InstallAuth applies artifacts/auth-rbac.yaml and auth-state.yaml, as an
// installation does; applying them again changes nothing.
func InstallAuth(ctx context.Context, t testing.TB) {
	t.Helper()
	InstallArtifacts(ctx, t, "auth-rbac.yaml", "auth-state.yaml")
}

// InstallArtifacts applies files of artifacts/ server-side, as an
// installation does.
func InstallArtifacts(ctx context.Context, t testing.TB, files ...string) {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"apply", "--server-side", "--field-manager=ichor-installer"}
	for _, f := range files {
		args = append(args, "-f", filepath.Join(root, "artifacts", f))
	}
	if _, err := CP.Kubectl(ctx, args...); err != nil {
		t.Fatal(err)
	}
}

// CreateUser creates an IchorUser, deleted when the test ends, and sets
// its password unless it is empty.
func CreateUser(ctx context.Context, t testing.TB, name string, spec v1alpha1.IchorUserSpec, password string) {
	t.Helper()
	users := APIClient(t).IchorV1alpha1().IchorUsers()
	if _, err := users.Create(ctx, &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = users.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if password == "" {
		return
	}
	if _, err := users.UpdatePassword(ctx, name, &v1alpha1.IchorUserPassword{ObjectMeta: metav1.ObjectMeta{Name: name}, Password: password}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// RunAuth runs ichor-auth in this process as its ServiceAccount, at the
// issuer URL the harness's kube-apiserver trusts, until stop is called or
// the test ends; it returns once ichor-auth is ready.
func RunAuth(t testing.TB, tune func(*authcmd.Options)) (stop func()) {
	t.Helper()
	InstallAuth(t.Context(), t)
	ControllerLogOnce.Do(func() {
		ctrl.SetLogger(zap.New(zap.WriteTo(&ControllerLog), zap.Level(zapcore.DebugLevel)))
	})
	o := authcmd.NewOptions()
	o.IssuerURL, o.BindAddress = CP.Auth.URL, CP.Auth.Address
	o.TLSCertFile, o.TLSKeyFile = CP.Auth.CertFile, CP.Auth.KeyFile
	o.Namespace = harness.IchorNamespace
	if tune != nil {
		tune(o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	// The address is the issuer's: a previous ichor-auth may still be letting it go.
	var ln net.Listener
	var lastErr error
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ln, lastErr = net.Listen("tcp", CP.Auth.Address)
		return lastErr == nil, nil
	}); err != nil {
		t.Fatalf("listen at the issuer's address: %v (%v)", err, lastErr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.RunOn(ctx, CP.ConfigFor(AuthUser, AuthGroups...), ln) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ichor-auth: %v", err)
		}
	}
	t.Cleanup(stop)
	WaitHTTPWith(t.Context(), t, IssuerHTTPClient(t), CP.Auth.URL+"/readyz")
	return stop
}

// IssuerHTTPClient trusts the issuers' CA.
func IssuerHTTPClient(t testing.TB) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(CP.Auth.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}
