package integration

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
	authUser   = "system:serviceaccount:" + harness.IchorNamespace + ":ichor-auth"
	authGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + harness.IchorNamespace}
)

// installAuth applies artifacts/auth-rbac.yaml and auth-state.yaml, as an
// installation does; applying them again changes nothing.
func installAuth(ctx context.Context, t testing.TB) {
	t.Helper()
	installArtifacts(ctx, t, "auth-rbac.yaml", "auth-state.yaml")
}

// installArtifacts applies files of artifacts/ server-side, as an
// installation does.
func installArtifacts(ctx context.Context, t testing.TB, files ...string) {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"apply", "--server-side", "--field-manager=ichor-installer"}
	for _, f := range files {
		args = append(args, "-f", filepath.Join(root, "artifacts", f))
	}
	if _, err := cp.Kubectl(ctx, args...); err != nil {
		t.Fatal(err)
	}
}

// createUser creates an IchorUser, deleted when the test ends, and sets
// its password unless it is empty.
func createUser(ctx context.Context, t testing.TB, name string, spec v1alpha1.IchorUserSpec, password string) {
	t.Helper()
	users := apiClient(t).IchorV1alpha1().IchorUsers()
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

// runAuth runs ichor-auth in this process as its ServiceAccount, at the
// issuer URL the harness's kube-apiserver trusts, until stop is called or
// the test ends; it returns once ichor-auth is ready.
func runAuth(t testing.TB, tune func(*authcmd.Options)) (stop func()) {
	t.Helper()
	installAuth(t.Context(), t)
	controllerLogOnce.Do(func() {
		ctrl.SetLogger(zap.New(zap.WriteTo(&controllerLog), zap.Level(zapcore.DebugLevel)))
	})
	o := authcmd.NewOptions()
	o.IssuerURL, o.BindAddress = cp.Auth.URL, cp.Auth.Address
	o.TLSCertFile, o.TLSKeyFile = cp.Auth.CertFile, cp.Auth.KeyFile
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
		ln, lastErr = net.Listen("tcp", cp.Auth.Address)
		return lastErr == nil, nil
	}); err != nil {
		t.Fatalf("listen at the issuer's address: %v (%v)", err, lastErr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.RunOn(ctx, cp.ConfigFor(authUser, authGroups...), ln) }()
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
	waitHTTPWith(t.Context(), t, issuerHTTPClient(t), cp.Auth.URL+"/readyz")
	return stop
}

// issuerHTTPClient trusts the issuers' CA.
func issuerHTTPClient(t testing.TB) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(cp.Auth.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}
