// Package download serves the download subresources: streamed GETs of what
// a node or a cluster hands out (an etcd snapshot, a support bundle, a
// packet capture, a reader talosconfig, the new admin credentials after a
// CA rotation). Each checks the download verb on
// its subresource with the authorizer (GETs pass no admission), refuses a
// dry run, gets a Talos credential for that one download through a
// TalosCredentialRequest, streams the answer without holding it in memory,
// and leaves an Event naming the user and an audit annotation.
//
// Get only decides whether the download may happen; the work (the
// credential, the Talos session, the stream) starts when the response asks
// for the stream, so every failure up to the first byte is still an API
// error with a status code, and a download that never starts leaves no
// Event.
package download

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/authz"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/talos"
)

// Deps are what every download endpoint needs.
type Deps struct {
	// Clusters reads the stored TalosClusters.
	Clusters rest.Getter
	// Machines reads and lists the stored TalosMachines.
	Machines interface {
		rest.Getter
		rest.Lister
	}
	// Authorizer decides the download verb.
	Authorizer authorizer.Authorizer
	// Credentials gets a Talos credential per download.
	Credentials *Credentials
	// Dialer opens Talos API sessions.
	Dialer talos.Dialer
	// Recorder records the Events; nil records none.
	Recorder events.EventRecorder
}

// Subresources are the download subresources served, for the server's
// long-running request check.
var Subresources = func() []string {
	var subresources []string
	for _, d := range ichor.Downloads {
		subresources = append(subresources, d.Subresource)
	}
	return subresources
}()

// refuseDryRun refuses a dry run: a download issues a Talos credential and
// records who downloaded what, which a dry run could not undo.
func refuseDryRun(dryRun []string) error {
	if len(dryRun) > 0 {
		return apierrors.NewBadRequest("a download cannot be a dry run: it issues a Talos credential and records who downloaded what")
	}
	return nil
}

// authorize checks the download verb on resource/subresource for the
// requester and returns the requester's name.
func (d *Deps) authorize(ctx context.Context, resource, subresource, name string) (string, error) {
	user, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return "", apierrors.NewUnauthorized("a download needs an authenticated user")
	}
	decision, reason, err := d.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: user, Verb: ichor.VerbDownload, Namespace: genericapirequest.NamespaceValue(ctx),
		APIGroup: ichor.GroupName, APIVersion: v1alpha1.SchemeGroupVersion.Version,
		Resource: resource, Subresource: subresource, Name: name, ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return user.GetName(), nil
	}
	msg := fmt.Sprintf("user %q cannot download %s/%s %q: it needs the %q verb on resource %q, subresource %q",
		user.GetName(), resource, subresource, name, ichor.VerbDownload, resource, subresource)
	msg = authz.Denied(msg, reason, err)
	return "", apierrors.NewForbidden(ichor.Resource(resource+"/"+subresource), name, errors.New(msg))
}

// configuredMachine returns the stored machine, which must be a configured
// member of its cluster.
func (d *Deps) configuredMachine(ctx context.Context, name string) (*ichor.TalosMachine, error) {
	obj, err := d.Machines.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	m := obj.(*ichor.TalosMachine)
	if !configuredMember(m) {
		return nil, apierrors.NewConflict(ichor.Resource("talosmachines"), name,
			errors.New("it is not a configured member of a cluster, so it has nothing to download"))
	}
	return m, nil
}

// cluster returns the stored cluster.
func (d *Deps) cluster(ctx context.Context, name string) (*ichor.TalosCluster, error) {
	obj, err := d.Clusters.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*ichor.TalosCluster), nil
}

// configuredMember reports whether m is an approved machine that runs its
// cluster's config.
func configuredMember(m *ichor.TalosMachine) bool {
	return m.DeletionTimestamp == nil && m.Status.AppliedConfig != nil &&
		m.Status.Approval != nil && m.Status.Approval.Decision == ichor.ApprovalApproved
}

// download is one download that may start: what the user gets and how it
// is recorded once the stream opens.
type download struct {
	deps        *Deps
	user        string
	object      *corev1.ObjectReference
	what        string // "the etcd-snapshot of TalosMachine cp-1"
	contentType string
	// open starts the stream.
	open opener
}

// opened is a download's stream, once started.
type opened struct {
	body io.ReadCloser
	// release, when set, runs once the response is done with body.
	release func()
	// credential refers to the TalosCredentialRequest that issued the
	// download's certificate. The Event relates to it, which also keeps
	// each download its own Event: the Events API folds Events that differ
	// only in their note into one series.
	credential *corev1.ObjectReference
}

var _ rest.ResourceStreamer = &download{}

func (d *download) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (d *download) DeepCopyObject() runtime.Object {
	panic("a download cannot be copied")
}

// peekSize is how much of the stream is read before the response starts:
// a node's refusal comes with its first message, and is then still an API
// error rather than a cut response.
const peekSize = 32 << 10

// InputStream opens the stream, waits for its first bytes, records the
// download and hands the stream to the response.
func (d *download) InputStream(ctx context.Context, _, _ string) (io.ReadCloser, bool, string, error) {
	o, err := d.open(ctx)
	if err != nil {
		return nil, false, "", err
	}
	r := &stream{r: bufio.NewReaderSize(o.body, peekSize), body: o.body, release: o.release, what: d.what}
	if _, err := r.r.Peek(1); err != nil && !errors.Is(err, io.EOF) {
		_ = r.Close()
		return nil, false, "", apierrors.NewServiceUnavailable(fmt.Sprintf("download %s: %v", d.what, err))
	}
	d.record(ctx, o.credential)
	return r, false, d.contentType, nil
}

// record leaves the Event naming the user and the audit annotation.
func (d *download) record(ctx context.Context, credential *corev1.ObjectReference) {
	msg := fmt.Sprintf("%s downloaded %s", d.user, d.what)
	audit.AddAuditAnnotation(ctx, ichor.AuditAnnotationDownload, msg)
	events.Record(d.deps.Recorder, d.object, credential, v1alpha1.EventDownloaded, "Download", "%s", msg)
}

// stream is the response body: the peeked reader over the node's stream,
// which closes the stream and then releases what it held.
type stream struct {
	// r is not embedded: its WriteTo would let io.Copy read past Read.
	r       *bufio.Reader
	body    io.Closer
	release func()
	// what is the download, for the log.
	what string
}

// Read passes the node's stream on. Once the response has started, a node
// that fails mid-stream can only be reported by aborting the response: the
// server copying the stream would otherwise end it as a complete file, a
// short pcap or snapshot with a 200. A handler that panics with
// http.ErrAbortHandler makes net/http reset the stream (kube-apiserver's
// proxy passes the reset on to the client). The end of the client's own
// request is not a failure: machinery ends a cancelled stream with EOF.
func (s *stream) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		klog.ErrorS(err, "Download failed after it started; aborting the response", "download", s.what)
		panic(http.ErrAbortHandler)
	}
	return n, err
}

func (s *stream) Close() error {
	err := s.body.Close()
	if s.release != nil {
		s.release()
	}
	return err
}

// reference is the Event's reference to obj.
func reference(kind string, obj metav1.Object) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: kind,
		Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
	}
}

// session gets a credential for purpose on machine m and opens a Talos
// session with it; it also returns the request that issued the credential.
func (d *Deps) session(ctx context.Context, m *ichor.TalosMachine, purpose v1alpha1.CredentialPurpose) (talos.Node, *corev1.ObjectReference, error) {
	issued, err := d.Credentials.Request(ctx, m.Namespace, m.Spec.ClusterName, []string{m.Name}, purpose)
	if err != nil {
		return nil, nil, err
	}
	node, err := d.Dialer.Configured(ctx, m.Spec.Address, issued.Credentials)
	if err != nil {
		return nil, nil, apierrors.NewServiceUnavailable(fmt.Sprintf("connect to TalosMachine %s: %v", m.Name, err))
	}
	return node, issued.Request, nil
}
