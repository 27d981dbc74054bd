package uploadserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/upload"
)

// tokens authenticates "Bearer NAME" as user NAME.
type tokens struct{}

func (tokens) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	name, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: name}}, true, nil
}

// only allows exactly one user the create on talosbackups/receive.
type only struct {
	user string
	got  []authorizer.Attributes
}

func (o *only) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	o.got = append(o.got, a)
	if (a.GetUser().GetName() == o.user || a.GetUser().GetName() == "root") && a.GetVerb() == "create" && a.GetAPIGroup() == v1alpha1.GroupName &&
		a.GetResource() == "talosbackups" && a.GetSubresource() == upload.ReceiveSubresource {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no RBAC rule allows it", nil
}

// receiver records what it received.
type receiver struct {
	key      types.NamespacedName
	uploader string
	body     string
	err      error
	// cause is why the receiver's context ended, if it did.
	cause error
	// flush is how long the receiver works after the last byte.
	flush time.Duration
}

func (r *receiver) Receive(ctx context.Context, key types.NamespacedName, uploader string, body io.Reader) (*v1alpha1.TalosBackup, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		r.cause = context.Cause(ctx)
		return nil, err
	}
	r.key, r.uploader, r.body = key, uploader, string(data)
	if r.flush > 0 {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(r.flush): // the slow target under test, not synchronisation
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return &v1alpha1.TalosBackup{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
		Status: v1alpha1.TalosBackupStatus{Phase: v1alpha1.BackupSucceeded}}, nil
}

func TestServeHTTP(t *testing.T) {
	authz := &only{user: "system:serviceaccount:ichor-system:ichor-apiserver"}
	rec := &receiver{}
	srv := httptest.NewServer(&Server{Authenticator: tokens{}, Authorizer: authorizer.AuthorizerFunc(authz.Authorize), Receiver: rec, Caller: authz.user})
	defer srv.Close()

	post := func(path, token, uploader, body string) (int, metav1.Status, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if uploader != "" {
			req.Header.Set(upload.UploaderHeader, uploader)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() //nolint:errcheck
		data, _ := io.ReadAll(resp.Body)
		var st metav1.Status
		_ = json.Unmarshal(data, &st)
		return resp.StatusCode, st, string(data)
	}
	path := upload.Path("team-a", "from-laptop")

	for _, c := range []struct {
		name, path, token, uploader string
		code                        int
		says                        string
	}{
		{"no credential", path, "", "carol", http.StatusUnauthorized, "ichor-apiserver only"},
		{"an admin, around ichor-apiserver", path, "carol", "dave", http.StatusForbidden, `user "carol" may not hand uploads to ichor-controller: it takes them from ` + authz.user + " only"},
		{"a cluster-admin RBAC allows, around ichor-apiserver", path, "root", "dave", http.StatusForbidden, `user "root" may not hand uploads to ichor-controller`},
		{"no uploader named", path, authz.user, "", http.StatusBadRequest, "names no uploader"},
		{"another path", "/uploads/ichor.dev/namespaces/team-a/talosoperations/x", authz.user, "carol", http.StatusNotFound, ""},
	} {
		code, st, raw := post(c.path, c.token, c.uploader, "snapshot")
		if code != c.code || int(st.Code) != c.code || !strings.Contains(st.Message, c.says) {
			t.Errorf("%s: %d %s; want %d saying %q", c.name, code, raw, c.code, c.says)
		}
		if rec.body != "" {
			t.Fatalf("%s: the receiver got %q", c.name, rec.body)
		}
	}
	// The caller pinned, RBAC is asked as well: revoking the rule stops uploads.
	caller := authz.user
	authz.user = "nobody"
	if code, st, raw := post(path, caller, "carol", "snapshot"); code != http.StatusForbidden || !strings.Contains(st.Message, "no RBAC rule allows it") {
		t.Errorf("the pinned caller without the RBAC rule: %d %s", code, raw)
	}
	authz.user = caller
	if len(authz.got) == 0 {
		t.Fatal("the authorizer was never asked")
	}
	if a := authz.got[0]; a.GetNamespace() != "team-a" || a.GetName() != "from-laptop" || !a.IsResourceRequest() {
		t.Errorf("authorized %+v, want the backup's namespace and name", a)
	}

	code, _, raw := post(path, authz.user, "carol", "snapshot")
	var b v1alpha1.TalosBackup
	if code != http.StatusOK || json.Unmarshal([]byte(raw), &b) != nil || b.Status.Phase != v1alpha1.BackupSucceeded {
		t.Fatalf("upload: %d %s", code, raw)
	}
	if rec.key != (types.NamespacedName{Namespace: "team-a", Name: "from-laptop"}) || rec.uploader != "carol" || rec.body != "snapshot" {
		t.Fatalf("received %+v", rec)
	}

	rec.err = apierrors.NewConflict(v1alpha1.Resource("talosbackups"), "from-laptop", errors.New("already holds its uploaded snapshot"))
	if code, st, raw := post(path, authz.user, "carol", "again"); code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict {
		t.Fatalf("a refused upload: %d %s", code, raw)
	}
}

// TestIdleUploadEnds: an uploader that stops sending ends its upload after
// the idle timeout, with a message that says so; one that keeps sending,
// however slowly, is not cut.
func TestIdleUploadEnds(t *testing.T) {
	authz := &only{user: "system:serviceaccount:ichor-system:ichor-apiserver"}
	rec := &receiver{}
	const idle = time.Second
	srv := httptest.NewServer(&Server{Authenticator: tokens{}, Authorizer: authorizer.AuthorizerFunc(authz.Authorize), Receiver: rec, Caller: authz.user, IdleTimeout: idle})
	defer srv.Close()

	send := func(body io.Reader) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+upload.Path("team-a", "from-laptop"), body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+authz.user)
		req.Header.Set(upload.UploaderHeader, "carol")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() //nolint:errcheck
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}

	// Slow but steady: a byte every quarter of the idle timeout, for 1.5 times it.
	pr, pw := io.Pipe()
	go func() {
		for range 6 {
			_, _ = pw.Write([]byte("x"))
			time.Sleep(idle / 4) // the slowness under test, not synchronisation
		}
		_ = pw.Close()
	}()
	if code, raw := send(pr); code != http.StatusOK || rec.body != "xxxxxx" {
		t.Fatalf("a slow upload: %d %s, received %q", code, raw, rec.body)
	}

	// A receiver that flushes for longer than the idle timeout after the
	// last byte is not cut: no deadline outlives the reads.
	rec.flush = idle + idle/2
	if code, raw := send(strings.NewReader("whole")); code != http.StatusOK || rec.body != "whole" {
		t.Fatalf("an upload whose receiver flushes past the idle timeout: %d %s", code, raw)
	}
	rec.flush = 0

	// Stalled after its first bytes: cut after the idle timeout.
	rec.body = ""
	pr, pw = io.Pipe()
	defer pw.Close() //nolint:errcheck
	go func() { _, _ = pw.Write([]byte("part")) }()
	code, raw := send(pr)
	if code == http.StatusOK || !strings.Contains(raw, "the uploader sent nothing for 1s") {
		t.Fatalf("a stalled upload: %d %s", code, raw)
	}
	// The receiver's context ends with the reason, before the read fails:
	// that is what a receiver that checks its context reports.
	if rec.cause == nil || !strings.Contains(rec.cause.Error(), "the uploader sent nothing for 1s") {
		t.Fatalf("the receiver's context ended with %v", rec.cause)
	}
}
