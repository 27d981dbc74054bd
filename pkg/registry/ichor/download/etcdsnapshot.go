// Package download serves the download subresources: streamed GETs of what
// a node produces (an etcd snapshot, …). Each checks the download verb on
// the subresource with the authorizer (GETs pass no admission), gets a Talos
// credential for that one download through a TalosCredentialRequest, streams
// the node's answer without holding it in memory, and leaves an Event naming
// the user and an audit annotation. A dry run is refused.
package download

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/events"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
)

// VerbDownload is the custom verb every download needs on its subresource.
const VerbDownload = "download"

// AuditAnnotation is the audit annotation naming what was downloaded.
const AuditAnnotation = "ichor.dev/download"

// Subresources are the download subresources served so far.
var Subresources = []string{"etcd-snapshot"}

// EventReason is the reason of the Event every download leaves.
const EventReason = "Downloaded"

// Deps are what every download endpoint needs.
type Deps struct {
	// Machines reads the stored TalosMachines.
	Machines rest.Getter
	// Authorizer decides the download verb.
	Authorizer authorizer.Authorizer
	// Credentials gets a Talos credential per download.
	Credentials *Credentials
	// Dialer opens Talos API sessions.
	Dialer talos.Dialer
	// Recorder records the Events; nil records none.
	Recorder events.EventRecorder
}

// EtcdSnapshotREST is GET talosmachines/NAME/etcd-snapshot: the etcd
// database of a control plane, as `talosctl etcd snapshot` saves it.
type EtcdSnapshotREST struct {
	Deps
}

var (
	_ rest.GetterWithOptions = &EtcdSnapshotREST{}
	_ rest.StorageMetadata   = &EtcdSnapshotREST{}
)

// New returns an empty TalosMachine, the kind the subresource belongs to.
func (r *EtcdSnapshotREST) New() runtime.Object { return &ichor.TalosMachine{} }

// Destroy does nothing: the main endpoint owns the storage.
func (r *EtcdSnapshotREST) Destroy() {}

// NewGetOptions returns the download's query parameters.
func (r *EtcdSnapshotREST) NewGetOptions() (runtime.Object, bool, string) {
	return &ichor.DownloadOptions{}, false, ""
}

// ProducesMIMETypes is what the stream is served as.
func (r *EtcdSnapshotREST) ProducesMIMETypes(string) []string {
	return []string{"application/octet-stream"}
}

// ProducesObject says the response is a stream, not an object.
func (r *EtcdSnapshotREST) ProducesObject(string) any { return "" }

// Get checks the request, opens the node's snapshot stream and returns it.
func (r *EtcdSnapshotREST) Get(ctx context.Context, name string, options runtime.Object) (runtime.Object, error) {
	const subresource = "etcd-snapshot"
	m, user, err := r.machineFor(ctx, name, subresource, options)
	if err != nil {
		return nil, err
	}
	if m.Spec.Role != ichor.MachineRoleControlPlane {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("TalosMachine %s is a %s; etcd runs on control planes only", name, m.Spec.Role))
	}
	creds, err := r.Credentials.Request(ctx, m.Namespace, m.Spec.ClusterName, []string{m.Name}, v1alpha1.PurposeEtcdSnapshot)
	if err != nil {
		return nil, err
	}
	node, err := r.Dialer.Configured(ctx, m.Spec.Address, creds)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("connect to TalosMachine %s: %v", name, err))
	}
	stream, err := node.EtcdSnapshot(ctx)
	if err != nil {
		_ = node.Close()
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("etcd snapshot of TalosMachine %s: %v", name, err))
	}
	r.record(ctx, m, user, subresource)
	return &streamer{body: stream, session: node, contentType: "application/octet-stream"}, nil
}

// machineFor refuses a dry run, checks the download verb and returns the
// stored machine, which must be a configured member of its cluster.
func (r *Deps) machineFor(ctx context.Context, name, subresource string, options runtime.Object) (*ichor.TalosMachine, string, error) {
	if o, ok := options.(*ichor.DownloadOptions); ok && len(o.DryRun) > 0 {
		return nil, "", apierrors.NewBadRequest("a download cannot be a dry run: it issues a Talos credential and records who downloaded what")
	}
	user, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, "", apierrors.NewUnauthorized("a download needs an authenticated user")
	}
	ns := genericapirequest.NamespaceValue(ctx)
	decision, reason, err := r.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: user, Verb: VerbDownload, Namespace: ns, APIGroup: ichor.GroupName, APIVersion: v1alpha1.SchemeGroupVersion.Version,
		Resource: "talosmachines", Subresource: subresource, Name: name, ResourceRequest: true,
	})
	if decision != authorizer.DecisionAllow {
		msg := fmt.Sprintf("user %q cannot download talosmachines/%s %q: it needs the %q verb on resource \"talosmachines\", subresource %q",
			user.GetName(), subresource, name, VerbDownload, subresource)
		if reason != "" {
			msg += ": " + reason
		}
		if err != nil {
			msg += fmt.Sprintf(" (authorizer error: %v)", err)
		}
		return nil, "", apierrors.NewForbidden(ichor.Resource("talosmachines/"+subresource), name, fmt.Errorf("%s", msg))
	}
	obj, err := r.Machines.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, "", err
	}
	m := obj.(*ichor.TalosMachine)
	if m.DeletionTimestamp != nil || m.Status.AppliedConfig == nil ||
		m.Status.Approval == nil || m.Status.Approval.Decision != ichor.ApprovalApproved {
		return nil, "", apierrors.NewConflict(ichor.Resource("talosmachines"), name,
			fmt.Errorf("it is not a configured member of a cluster, so it has nothing to download"))
	}
	return m, user.GetName(), nil
}

// record leaves the Event naming the user and the audit annotation.
func (r *Deps) record(ctx context.Context, m *ichor.TalosMachine, user, subresource string) {
	what := fmt.Sprintf("%s downloaded the %s of TalosMachine %s", user, subresource, m.Name)
	audit.AddAuditAnnotation(ctx, AuditAnnotation, what)
	if r.Recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{
		APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "TalosMachine",
		Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
	}
	r.Recorder.Eventf(ref, nil, corev1.EventTypeNormal, EventReason, "Download", "%s", what)
}

// streamer hands the node's stream to the response and closes the Talos
// session with it.
type streamer struct {
	body        io.ReadCloser
	session     talos.Node
	contentType string
}

var _ rest.ResourceStreamer = &streamer{}

func (s *streamer) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (s *streamer) DeepCopyObject() runtime.Object {
	panic("a download stream cannot be copied")
}

// InputStream returns the stream, read once by the response.
func (s *streamer) InputStream(context.Context, string, string) (io.ReadCloser, bool, string, error) {
	return &closer{ReadCloser: s.body, session: s.session}, false, s.contentType, nil
}

type closer struct {
	io.ReadCloser
	session talos.Node
}

func (c *closer) Close() error {
	err := c.ReadCloser.Close()
	_ = c.session.Close()
	return err
}
