package talosbackup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/audit"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	restclient "k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/upload"
)

// Controller is ichor-controller's upload endpoint as ichor-apiserver
// reaches it: over TLS, verified against CAFile, and authenticated as
// ichor-apiserver itself.
type Controller struct {
	// URL is the endpoint's base URL (https://ichor-controller.ichor-system.svc:9443).
	URL string
	// CAFile holds the CA certificates that issue its serving certificate.
	CAFile string
}

// Forwarder streams uploads on to ichor-controller.
type Forwarder struct {
	base   *url.URL
	client *http.Client
}

// NewForwarder is a Forwarder to c that authenticates as identity does to
// kube-apiserver (its ServiceAccount token, or its client certificate).
func NewForwarder(c Controller, identity *restclient.Config) (*Forwarder, error) {
	base, err := url.Parse(c.URL)
	if err != nil || base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("--controller-upload-url %q: must be an https URL", c.URL)
	}
	if c.CAFile == "" {
		return nil, errors.New("--controller-upload-url needs --controller-upload-ca-file")
	}
	cfg := restclient.CopyConfig(identity)
	cfg.Host = c.URL
	cfg.TLSClientConfig.CAFile, cfg.TLSClientConfig.CAData = c.CAFile, nil
	cfg.TLSClientConfig.ServerName, cfg.TLSClientConfig.Insecure = "", false
	rt, err := restclient.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client of ichor-controller's upload endpoint: %w", err)
	}
	// No timeout: a snapshot takes as long as it takes; the request's
	// context ends the forward when the uploader goes away.
	return &Forwarder{base: base, client: &http.Client{Transport: rt}}, nil
}

// UploadREST is POST talosbackups/NAME/upload: an etcd snapshot streamed
// in as the request's body, written by ichor-controller into the backup.
// RBAC's create on the subresource decides who may, in the handler chain,
// as for any POST.
type UploadREST struct {
	// Backups reads the stored TalosBackups.
	Backups rest.Getter
	// Forwarder reaches ichor-controller; nil when no endpoint is configured.
	Forwarder *Forwarder
}

var (
	_ rest.Connecter       = &UploadREST{}
	_ rest.StorageMetadata = &UploadREST{}
)

// New returns an empty TalosBackup: what the upload answers with.
func (r *UploadREST) New() runtime.Object { return &ichor.TalosBackup{} }

// Destroy does nothing: the storage is the main resource's.
func (r *UploadREST) Destroy() {}

// ConnectMethods are the methods the subresource takes.
func (r *UploadREST) ConnectMethods() []string { return []string{http.MethodPost} }

// NewConnectOptions says the upload has no query parameters.
func (r *UploadREST) NewConnectOptions() (runtime.Object, bool, string) { return nil, false, "" }

// ProducesMIMETypes is what the answer is served as.
func (r *UploadREST) ProducesMIMETypes(string) []string { return []string{"application/json"} }

// ProducesObject is the answer's kind.
func (r *UploadREST) ProducesObject(string) any { return v1alpha1.TalosBackup{} }

// Connect checks what can be checked before the body is read, then
// returns the handler that streams the body to ichor-controller.
func (r *UploadREST) Connect(ctx context.Context, name string, _ runtime.Object, responder rest.Responder) (http.Handler, error) {
	user, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewUnauthorized("no user")
	}
	namespace := genericapirequest.NamespaceValue(ctx)
	obj, err := r.Backups.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	b := obj.(*ichor.TalosBackup)
	if b.Spec.Upload == nil {
		return nil, apierrors.NewBadRequest(upload.NotAnUpload(name))
	}
	if r.Forwarder == nil {
		return nil, apierrors.NewServiceUnavailable(
			"this installation takes no uploads: ichor-apiserver has no --controller-upload-url, or ichor-controller no --upload-bind-address")
	}
	audit.AddAuditAnnotation(ctx, "ichor.dev/upload", fmt.Sprintf("etcd snapshot into TalosBackup %s/%s", namespace, name))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		got, err := r.Forwarder.forward(req.Context(), namespace, name, user.GetName(), req.Body)
		if err != nil {
			responder.Error(err)
			return
		}
		responder.Object(http.StatusOK, got)
	}), nil
}

// forward streams body to the controller and returns its answer: the
// backup as it ended, or the API error it refused with.
func (f *Forwarder) forward(ctx context.Context, namespace, name, uploader string, body io.Reader) (*ichor.TalosBackup, error) {
	u := f.base.JoinPath(upload.Path(namespace, name))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(upload.UploaderHeader, uploader)
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf(
			"ichor-controller's upload endpoint (%s) did not answer or broke off: %v; see the TalosBackup's status for what, if anything, was written", f.base.Host, err))
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("ichor-controller's answer to the upload broke off: %v", err))
	}
	if resp.StatusCode != http.StatusOK {
		var st metav1.Status
		if json.Unmarshal(data, &st) != nil || st.Code == 0 {
			return nil, apierrors.NewInternalError(fmt.Errorf("ichor-controller answered the upload with %s", resp.Status))
		}
		if st.Code == http.StatusUnauthorized || st.Code == http.StatusForbidden {
			// The controller refused this server, not the uploader.
			return nil, apierrors.NewServiceUnavailable("ichor-controller refused ichor-apiserver's upload: " + st.Message)
		}
		return nil, &apierrors.StatusError{ErrStatus: st}
	}
	var b v1alpha1.TalosBackup
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("ichor-controller's answer to the upload: %w", err))
	}
	var out ichor.TalosBackup
	if err := v1alpha1.Convert_v1alpha1_TalosBackup_To_ichor_TalosBackup(&b, &out, nil); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return &out, nil
}
