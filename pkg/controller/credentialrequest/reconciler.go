// Package credentialrequest answers TalosCredentialRequests: it certifies the
// requester's public key as a Talos API client for the least role the purpose
// needs, for at most ten minutes (an hour for a reader talosconfig), or
// denies the request with a reason, and deletes every answered request a
// little later. Admission has already
// checked that the requester may do through Ichor what the purpose allows.
package credentialrequest

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/installation"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "taloscredentialrequest"

// MaxLifetime caps the certificate of every purpose but talosconfig-reader,
// whatever the installation's settings say: each is for one download.
const MaxLifetime = v1alpha1.MaxTalosCredentialLife

// MaxReaderTalosconfigLifetime caps talosconfig-reader certificates: a
// reader talosconfig is for a person to use for a while (DESIGN.md: one
// hour), and os:reader reads no secret.
const MaxReaderTalosconfigLifetime = v1alpha1.MaxReaderTalosconfigAge

// CredentialsLifetime is the lifetime of the new admin credentials a CA
// rotation hands out once: long enough for a person to put them to use or
// seal them away, short for an os:admin and system:masters certificate.
const CredentialsLifetime = time.Hour

// DefaultRetention is how long an answered request stays for its requester to read.
const DefaultRetention = 2 * time.Minute

// retryInterval paces a request whose cluster's secrets are not ready yet.
const retryInterval = 10 * time.Second

// Options tune the reconciler.
type Options struct {
	// Retention is how long answered requests are kept; DefaultRetention when zero.
	Retention time.Duration
}

// Reconciler answers TalosCredentialRequests.
type Reconciler struct {
	Client   client.Client
	Secrets  client.Reader
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Options.Retention <= 0 {
		r.Options.Retention = DefaultRetention
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.TalosCredentialRequest{}).
		Complete(r)
}

// Reconcile answers one request, or deletes it once its retention is over.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cr v1alpha1.TalosCredentialRequest
	if err := r.Client.Get(ctx, req.NamespacedName, &cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cr.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if answeredAt, ok := answered(&cr); ok {
		return r.expire(ctx, &cr, answeredAt)
	}

	now := r.Now()
	cond, retry, err := r.answer(ctx, &cr, now)
	if err != nil || retry > 0 {
		return ctrl.Result{RequeueAfter: retry}, err
	}
	cond.ObservedGeneration, cond.LastTransitionTime = cr.Generation, metav1.NewTime(now)
	if cond.Type == v1alpha1.CredentialRequestDenied {
		meta.RemoveStatusCondition(&cr.Status.Conditions, v1alpha1.CredentialRequestIssued) // a mark of taking
	}
	meta.SetStatusCondition(&cr.Status.Conditions, cond)
	if err := r.Client.Status().Update(ctx, &cr); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, fmt.Errorf("answer TalosCredentialRequest %s: %w", req, err)
	}

	log.FromContext(ctx).Info("Answered Talos credential request", "requester", cr.Spec.Username,
		"purpose", cr.Spec.Purpose, "answer", cond.Type, "reason", cond.Reason, "role", cr.Status.Role)
	// The table gives Issued as Normal, every reason of a denial as Warning.
	events.Record(r.Recorder, &cr, nil, v1alpha1.EventReason(cond.Reason), "Answer", "%s", cond.Message)
	return ctrl.Result{RequeueAfter: r.Options.Retention}, nil
}

// answer decides the request: an Issued condition with the certificate in
// status, or a Denied one. A positive retry means "not yet, ask again then".
func (r *Reconciler) answer(ctx context.Context, cr *v1alpha1.TalosCredentialRequest, now time.Time) (metav1.Condition, time.Duration, error) {
	deny := func(reason, format string, args ...any) (metav1.Condition, time.Duration, error) {
		return metav1.Condition{Type: v1alpha1.CredentialRequestDenied, Status: metav1.ConditionTrue, Reason: reason, Message: fmt.Sprintf(format, args...)}, 0, nil
	}
	spec := &cr.Spec
	rule, ok := ichor.CredentialPurposes[ichor.CredentialPurpose(spec.Purpose)]
	talosRole := role.Role(rule.TalosRole)
	if !ok {
		return deny(v1alpha1.CredentialRequestReasonUnknownPurpose, "purpose %q grants no Talos role", spec.Purpose)
	}
	if spec.Username == "" {
		return deny(v1alpha1.CredentialRequestReasonNoRequester, "the request names no authenticated requester")
	}
	pub, err := parsePublicKey(spec.PublicKey)
	if err != nil {
		return deny(v1alpha1.CredentialRequestReasonBadPublicKey, "%v", err)
	}

	var cluster v1alpha1.TalosCluster
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: cr.Namespace, Name: spec.ClusterName}, &cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return deny(v1alpha1.CredentialRequestReasonClusterNotFound, "TalosCluster %s/%s does not exist", cr.Namespace, spec.ClusterName)
		}
		return metav1.Condition{}, 0, err
	}
	for _, name := range spec.Machines {
		var m v1alpha1.TalosMachine
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: cr.Namespace, Name: name}, &m)
		if apierrors.IsNotFound(err) || (err == nil && (m.Spec.ClusterName != cluster.Name || !clusterindex.Member(&m))) {
			return deny(v1alpha1.CredentialRequestReasonMachineNotFound, "TalosMachine %s is not an approved machine of TalosCluster %s", name, cluster.Name)
		}
		if err != nil {
			return metav1.Condition{}, 0, err
		}
	}
	bundle, err := bundlestore.Load(ctx, r.Secrets, &cluster)
	if err != nil {
		log.FromContext(ctx).Info("Waiting for the cluster's secrets bundle", "cluster", cluster.Name, "error", err.Error())
		return metav1.Condition{}, retryInterval, nil
	}

	lifetime, err := r.lifetime(ctx, spec.Purpose)
	if err != nil {
		return metav1.Condition{}, 0, err
	}
	if spec.Purpose == v1alpha1.PurposeCredentials {
		if denied, msg, retry, err := r.takeCredentials(ctx, cr, &cluster, now); err != nil || denied != "" || retry > 0 {
			if denied != "" {
				return deny(denied, "%s", msg)
			}
			return metav1.Condition{}, retry, err
		}
		kubePEM, err := workload.SignClientCertificate(bundle.Bundle, pub,
			workload.Identity{User: spec.Username, Groups: []string{workload.MastersGroup}}, now, lifetime)
		if err != nil {
			return metav1.Condition{}, 0, err
		}
		cr.Status.KubernetesCertificate = string(kubePEM)
	}
	certPEM, notAfter, err := talos.SignClientCertificate(bundle.Bundle, pub, spec.Username, role.MakeSet(talosRole), now, lifetime)
	if err != nil {
		return metav1.Condition{}, 0, err
	}
	cr.Status.Role = string(talosRole)
	cr.Status.Certificate = string(certPEM)
	cr.Status.CABundle = string(bundle.TalosCA())
	expires := metav1.NewTime(notAfter)
	cr.Status.ExpirationTimestamp = &expires
	return metav1.Condition{Type: v1alpha1.CredentialRequestIssued, Status: metav1.ConditionTrue, Reason: v1alpha1.CredentialRequestReasonIssued,
		Message: fmt.Sprintf("issued a %s certificate for %s to %s, valid until %s",
			talosRole, spec.Purpose, spec.Username, notAfter.UTC().Format(time.RFC3339))}, 0, nil
}

// reasonTaking is the reason of the Issued condition, status Unknown, that
// marks a credentials request about to take its cluster's new admin
// credentials. The cluster records only the request's name, so this mark,
// written on the request object itself before the take (no person may
// write a request's status), is what tells the request that took them,
// whose answer may be written again, from one re-created under its name.
const reasonTaking = "TakingCredentials"

// takeCredentials marks the new admin credentials of the cluster's last
// CA rotation as served by cr, on the version of the cluster just read, or
// says why not (a Denied reason and message): there are none before a
// rotation completed, and they are served once. The request that took them
// already (the one the cluster names and that carries the mark, not another
// of its name) may be answered again: its answer was not written.
func (r *Reconciler) takeCredentials(ctx context.Context, cr *v1alpha1.TalosCredentialRequest, cluster *v1alpha1.TalosCluster, now time.Time) (string, string, time.Duration, error) {
	c := cluster.Status.Credentials
	taking := meta.FindStatusCondition(cr.Status.Conditions, v1alpha1.CredentialRequestIssued)
	marked := taking != nil && taking.Status == metav1.ConditionUnknown && taking.Reason == reasonTaking
	switch {
	case c == nil:
		return v1alpha1.CredentialRequestReasonNoNewCredentials, fmt.Sprintf(
			"no CA rotation of TalosCluster %s has completed: there are no new admin credentials to hand out", cluster.Name), 0, nil
	case c.ServedAt != nil && marked && c.Request == cr.Name && c.ServedTo == cr.Spec.Username:
		return "", "", 0, nil
	case c.ServedAt != nil:
		return v1alpha1.CredentialRequestReasonAlreadyServed, fmt.Sprintf(
			"the new admin credentials of TalosOperation %s (completed %s) were downloaded by %s at %s; they are served once",
			c.Rotation, c.RotatedAt.UTC().Format(time.RFC3339), c.ServedTo, c.ServedAt.UTC().Format(time.RFC3339)), 0, nil
	}
	if !marked {
		meta.SetStatusCondition(&cr.Status.Conditions, metav1.Condition{
			Type: v1alpha1.CredentialRequestIssued, Status: metav1.ConditionUnknown, Reason: reasonTaking,
			Message:            fmt.Sprintf("taking the new admin credentials of TalosOperation %s for %s", c.Rotation, cr.Spec.Username),
			ObservedGeneration: cr.Generation, LastTransitionTime: metav1.NewTime(now),
		})
		if err := r.Client.Status().Update(ctx, cr); err != nil {
			if apierrors.IsConflict(err) {
				return "", "", time.Second, nil
			}
			return "", "", 0, fmt.Errorf("mark TalosCredentialRequest %s/%s as taking the new admin credentials: %w", cr.Namespace, cr.Name, err)
		}
	}
	patch := client.MergeFromWithOptions(cluster.DeepCopy(), client.MergeFromWithOptimisticLock{})
	at := metav1.NewTime(now)
	cluster.Status.Credentials.ServedTo, cluster.Status.Credentials.ServedAt, cluster.Status.Credentials.Request = cr.Spec.Username, &at, cr.Name
	err := r.Client.Status().Patch(ctx, cluster, patch)
	if apierrors.IsConflict(err) {
		return "", "", time.Second, nil // read the cluster again: another request may have taken them
	}
	if err != nil {
		return "", "", 0, fmt.Errorf("mark the new admin credentials of TalosCluster %s served: %w", cluster.Name, err)
	}
	return "", "", 0, nil
}

// lifetime is the installation's lifetime for the purpose's certificates
// (readerTalosconfig for talosconfig-reader, talosCredential otherwise),
// capped at the purpose's maximum, which is also the default.
func (r *Reconciler) lifetime(ctx context.Context, purpose v1alpha1.CredentialPurpose) (time.Duration, error) {
	if purpose == v1alpha1.PurposeCredentials {
		return CredentialsLifetime, nil
	}
	limit := MaxLifetime
	setting := func(l *v1alpha1.CredentialLifetimes) *metav1.Duration { return l.TalosCredential }
	if purpose == v1alpha1.PurposeTalosconfigReader {
		limit = MaxReaderTalosconfigLifetime
		setting = func(l *v1alpha1.CredentialLifetimes) *metav1.Duration { return l.ReaderTalosconfig }
	}
	settings, err := installation.Settings(ctx, r.Client)
	if err != nil {
		return 0, err
	}
	if d := setting(&settings.CredentialLifetimes); d != nil && d.Duration > 0 && d.Duration < limit {
		return d.Duration, nil
	}
	return limit, nil
}

// expire deletes an answered request once its retention is over.
func (r *Reconciler) expire(ctx context.Context, cr *v1alpha1.TalosCredentialRequest, answeredAt time.Time) (ctrl.Result, error) {
	if left := answeredAt.Add(r.Options.Retention).Sub(r.Now()); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	if err := r.Client.Delete(ctx, cr, client.Preconditions{UID: &cr.UID}); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("delete answered TalosCredentialRequest %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	return ctrl.Result{}, nil
}

// answered returns when the request was issued or denied.
func answered(cr *v1alpha1.TalosCredentialRequest) (time.Time, bool) {
	for _, t := range []string{v1alpha1.CredentialRequestIssued, v1alpha1.CredentialRequestDenied} {
		if c := meta.FindStatusCondition(cr.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// parsePublicKey reads the PEM PKIX public key the server has validated.
func parsePublicKey(text string) (any, error) {
	block, _ := pem.Decode([]byte(text))
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("publicKey is not a PEM PUBLIC KEY block")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("publicKey: %w", err)
	}
	return pub, nil
}
