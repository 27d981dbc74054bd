// Package uploadserver is ichor-controller's HTTPS endpoint for uploads.
//
// People upload an etcd snapshot to ichor-apiserver
// (POST talosbackups/NAME/upload), which checks their right to and streams
// the body on to this endpoint, as kube-apiserver streams exec to the
// kubelet: ichor-controller alone holds the credentials of backup targets,
// and a snapshot is gigabytes, so it goes through the apiserver and is
// never kept there.
//
// The endpoint authenticates its caller as kube-apiserver would (a client
// certificate from the cluster's client CA, or a token through a
// TokenReview) and asks kube-apiserver, with a SubjectAccessReview, whether
// the caller may create talosbackups/receive in the backup's namespace: a
// right only ichor-apiserver's ServiceAccount holds. It then trusts the
// uploader that ichor-apiserver names in a header, as it trusts the
// apiserver to have checked that person's right to upload.
package uploadserver

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/upload"
)

// Receiver writes an uploaded snapshot into an upload backup.
type Receiver interface {
	Receive(ctx context.Context, key types.NamespacedName, uploader string, body io.Reader) (*v1alpha1.TalosBackup, error)
}

// Server serves uploads. It is a manager.Runnable that runs on the elected
// replica only: one replica acts, as for everything else the controller does.
type Server struct {
	// BindAddress is host:port to listen on.
	BindAddress string
	// CertFile and KeyFile are the serving certificate, reloaded when they change.
	CertFile, KeyFile string
	// Kube is the management cluster's kube-apiserver, which authenticates
	// and authorizes callers.
	Kube kubernetes.Interface
	// Authenticator authenticates the caller, and Authorizer decides its
	// create on talosbackups/receive; both delegate to Kube when nil.
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer
	// Caller is the one user uploads are taken from (ichor-apiserver's
	// ServiceAccount), whatever else RBAC lets do the same: a cluster-admin
	// or a ServiceAccount with wildcard rights passes the SubjectAccessReview
	// too, and must not upload in another's name around ichor-apiserver.
	Caller string
	// Receiver writes what is received.
	Receiver Receiver
	// IdleTimeout ends an upload whose uploader sends nothing for that
	// long (0: never), so that a stalled client does not hold the backup
	// Uploading, and a connection open, for ever.
	IdleTimeout time.Duration
	// Started, when not nil, is called with the address listened on.
	Started func(net.Addr)
}

// NeedLeaderElection is true: only the active replica receives uploads.
func (s *Server) NeedLeaderElection() bool { return true }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	if s.Authenticator == nil || s.Authorizer == nil {
		if err := s.delegate(ctx, s.Kube); err != nil {
			return fmt.Errorf("upload endpoint: delegated authentication: %w", err)
		}
	}
	certs, err := certwatcher.New(s.CertFile, s.KeyFile)
	if err != nil {
		return fmt.Errorf("upload endpoint's serving certificate: %w", err)
	}
	go func() {
		if err := certs.Start(ctx); err != nil {
			log.FromContext(ctx).Error(err, "watching the upload endpoint's serving certificate")
		}
	}()
	l, err := net.Listen("tcp", s.BindAddress)
	if err != nil {
		return fmt.Errorf("upload endpoint: %w", err)
	}
	srv := &http.Server{
		Handler: s,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: certs.GetCertificate,
			// Asked for, and verified by the authenticator against the
			// cluster's client CA, as kube-apiserver does.
			ClientAuth: tls.RequestClientCert,
			// HTTP/1.1 only, as controller-runtime's own servers: an
			// upload is one long stream, and HTTP/2's stream resets are
			// a denial of service this endpoint need not risk.
			NextProtos: []string{"http/1.1"},
		},
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	if s.Started != nil {
		s.Started(l.Addr())
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(l, "", "") }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ServeHTTP receives one upload.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, ok := upload.ParsePath(r.URL.Path)
	if !ok {
		writeError(w, apierrors.NewNotFound(v1alpha1.Resource("talosbackups"), r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, apierrors.NewMethodNotSupported(v1alpha1.Resource("talosbackups"), r.Method))
		return
	}
	resp, ok, err := s.Authenticator.AuthenticateRequest(r)
	if err != nil || !ok {
		writeError(w, apierrors.NewUnauthorized("the upload endpoint takes requests from ichor-apiserver only"))
		return
	}
	if resp.User.GetName() != s.Caller {
		writeError(w, apierrors.NewForbidden(v1alpha1.Resource("talosbackups/"+upload.ReceiveSubresource), key.Name,
			fmt.Errorf("user %q may not hand uploads to ichor-controller: it takes them from %s only", resp.User.GetName(), s.Caller)))
		return
	}
	decision, reason, err := s.Authorizer.Authorize(r.Context(), authorizer.AttributesRecord{
		User: resp.User, Verb: "create", ResourceRequest: true,
		APIGroup: v1alpha1.GroupName, APIVersion: v1alpha1.SchemeGroupVersion.Version,
		Resource: "talosbackups", Subresource: upload.ReceiveSubresource, Namespace: key.Namespace, Name: key.Name,
	})
	if err != nil || decision != authorizer.DecisionAllow {
		writeError(w, apierrors.NewForbidden(v1alpha1.Resource("talosbackups/"+upload.ReceiveSubresource), key.Name,
			fmt.Errorf("user %q may not hand uploads to ichor-controller: %s", resp.User.GetName(), reason)))
		return
	}
	uploader := r.Header.Get(upload.UploaderHeader)
	if uploader == "" {
		writeError(w, apierrors.NewBadRequest("the "+upload.UploaderHeader+" header names no uploader"))
		return
	}
	log.FromContext(r.Context()).Info("receiving an upload", "backup", key.String(), "uploader", uploader, "from", resp.User.GetName())
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	b, err := s.Receiver.Receive(ctx, key, uploader, &cuttable{r: r.Body, rc: http.NewResponseController(w), idle: s.IdleTimeout, cancel: cancel})
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(b)
}

// cuttable is a request body whose blocked read a deadline ends: a
// receiver that must stop (its backup is deleted) does not wait for a
// stalled uploader's next byte. A read that waits longer than idle cuts
// the body the same way, having first cancelled the receiver's context
// with the reason. The idle limit is a timer that runs during a read
// only: no deadline stays armed between reads, nor after the last one
// (net/http then reads the connection on its own, and an old deadline
// would cancel a receiver still flushing its last parts).
type cuttable struct {
	r      io.Reader
	rc     *http.ResponseController
	idle   time.Duration
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	cut     bool
	expired error
}

// Read reads, cut after idle without a byte.
func (c *cuttable) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.cut {
		c.mu.Unlock()
		return 0, os.ErrDeadlineExceeded
	}
	var timer *time.Timer
	if c.idle > 0 {
		timer = time.AfterFunc(c.idle, c.expire)
	}
	c.mu.Unlock()
	n, err := c.r.Read(p)
	if timer != nil {
		timer.Stop()
	}
	if err != nil {
		c.mu.Lock()
		if c.expired != nil {
			err = fmt.Errorf("%w: %w", c.expired, err)
		}
		c.mu.Unlock()
	}
	return n, err
}

// expire cuts a read that waited idle: the receiver's context ends with
// the reason before the read fails, so that the reason is what it reports.
func (c *cuttable) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return
	}
	c.cut = true
	c.expired = fmt.Errorf("the uploader sent nothing for %s", c.idle)
	c.cancel(c.expired)
	_ = c.rc.SetReadDeadline(time.Now())
}

// SetReadDeadline cuts the body at t: no later read waits.
func (c *cuttable) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	return c.rc.SetReadDeadline(t)
}

// writeError answers with err as a metav1.Status, as the API server would.
func writeError(w http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	st := metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError, Message: err.Error()}
	if errors.As(err, &status) {
		st = status.Status()
	}
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}
