package talosbackup

import (
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	restclient "k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/controller/uploadserver"
)

// apiserverToken authenticates the one bearer token ichor-apiserver holds.
type apiserverToken struct{}

func (apiserverToken) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if r.Header.Get("Authorization") != "Bearer ichor-apiserver-token" {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: "ichor-apiserver"}}, true, nil
}

// counting receives an upload by counting its bytes.
type counting struct {
	n        int64
	uploader string
}

func (c *counting) Receive(_ context.Context, key types.NamespacedName, uploader string, body io.Reader) (*v1alpha1.TalosBackup, error) {
	n, err := io.Copy(io.Discard, body)
	if err != nil {
		return nil, err
	}
	c.n, c.uploader = n, uploader
	if key.Name == "refused" {
		return nil, apierrors.NewBadRequest("the uploaded bytes have another digest")
	}
	return &v1alpha1.TalosBackup{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
		Spec: v1alpha1.TalosBackupSpec{ClusterName: "prod"}, Status: v1alpha1.TalosBackupStatus{Phase: v1alpha1.BackupSucceeded}}, nil
}

// zeros is n zero bytes, made as they are read.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), z.n)
	clear(p[:k])
	z.n -= k
	return int(k), nil
}

// TestForwardStreams sends an upload through the Forwarder to the
// controller's real endpoint over TLS, as ichor-apiserver's identity: the
// bytes and the uploader arrive, the answer comes back as an internal
// object or as the API error the controller said, and neither side holds
// the stream: the live heap stays far below its size.
func TestForwardStreams(t *testing.T) {
	rec := &counting{}
	srv := httptest.NewTLSServer(&uploadserver.Server{
		Authenticator: apiserverToken{}, Receiver: rec, Caller: "ichor-apiserver",
		Authorizer: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			if a.GetUser().GetName() == "ichor-apiserver" {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, "", nil
		}),
	})
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewForwarder(Controller{URL: srv.URL, CAFile: ca}, &restclient.Config{BearerToken: "ichor-apiserver-token"})
	if err != nil {
		t.Fatal(err)
	}

	const size = 128 << 20
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	read := func() uint64 { metrics.Read(live); return live[0].Value.Uint64() }
	runtime.GC()
	baseline := read()
	var peak uint64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				peak = max(peak, read())
			}
		}
	})
	b, err := f.forward(t.Context(), "team-a", "from-laptop", "carol", &zeros{n: size})
	close(stop)
	sampler.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if b.Name != "from-laptop" || b.Status.Phase != "Succeeded" || rec.n != size || rec.uploader != "carol" {
		t.Fatalf("forwarded %d bytes from %q, answered %+v", rec.n, rec.uploader, b)
	}
	growth := int64(peak) - int64(baseline)
	t.Logf("forwarded %d MiB; the live heap grew by at most %.1f MiB", size>>20, float64(growth)/(1<<20))
	if growth > 32<<20 {
		t.Errorf("the live heap grew by %d MiB while %d MiB streamed: something holds the stream", growth>>20, size>>20)
	}

	if _, err := f.forward(t.Context(), "team-a", "refused", "carol", strings.NewReader("x")); !apierrors.IsBadRequest(err) ||
		!strings.Contains(err.Error(), "another digest") {
		t.Fatalf("a refused upload: %v, want the controller's 400", err)
	}
	other, err := NewForwarder(Controller{URL: srv.URL, CAFile: ca}, &restclient.Config{BearerToken: "someone-else"})
	if err != nil {
		t.Fatal(err)
	}
	// The controller refusing ichor-apiserver is the server's failure, not
	// the uploader's: never a 401 that would send kubectl to log in again.
	if _, err := other.forward(t.Context(), "team-a", "from-laptop", "carol", strings.NewReader("x")); !apierrors.IsServiceUnavailable(err) ||
		!strings.Contains(err.Error(), "refused ichor-apiserver") {
		t.Fatalf("a forward as someone else: %v, want ServiceUnavailable", err)
	}
	if _, err := NewForwarder(Controller{URL: "http://" + strings.TrimPrefix(srv.URL, "https://"), CAFile: ca}, &restclient.Config{}); err == nil {
		t.Fatal("a plain-HTTP controller URL was taken")
	}
}
