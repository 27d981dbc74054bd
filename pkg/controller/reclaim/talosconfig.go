package reclaim

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/talos"
)

// errBadTalosconfig marks a talosconfig Secret that cannot be used;
// errReadingSecret a read that failed and may work when tried again.
var (
	errBadTalosconfig = errors.New("bad talosconfig")
	errReadingSecret  = errors.New("read Secret")
)

// talosconfig reads the credentials of an unmanaged reclaim from its Secret,
// which must be of type ichor.dev/talosconfig: a Secret of another type (a
// secrets bundle, say) is never read as one, nor deleted.
func (r *Reconciler) talosconfig(ctx context.Context, rc *v1alpha1.MachineReclaim) (talos.Credentials, error) {
	ref := rc.Spec.Unmanaged.TalosconfigSecretRef
	var secret corev1.Secret
	if err := r.Secrets.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: ref.Name}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return talos.Credentials{}, fmt.Errorf("%w: Secret %s does not exist (it is deleted after one reset)", errBadTalosconfig, ref.Name)
		}
		if apierrors.IsForbidden(err) {
			return talos.Credentials{}, fmt.Errorf("%w: ichor-controller may not read Secrets in namespace %s; bind ClusterRole ichor-controller-secrets there",
				errBadTalosconfig, rc.Namespace)
		}
		return talos.Credentials{}, fmt.Errorf("%w %s: %w", errReadingSecret, ref.Name, err)
	}
	if secret.Type != v1alpha1.SecretTypeTalosconfig {
		return talos.Credentials{}, fmt.Errorf("%w: Secret %s is of type %q, not %q: only a Secret of that type is handed over to be used once and deleted",
			errBadTalosconfig, ref.Name, secret.Type, v1alpha1.SecretTypeTalosconfig)
	}
	data, ok := secret.Data[ref.Key]
	if !ok {
		return talos.Credentials{}, fmt.Errorf("%w: Secret %s has no key %q", errBadTalosconfig, ref.Name, ref.Key)
	}
	creds, err := talos.CredentialsFromTalosconfig(data)
	if err != nil {
		return talos.Credentials{}, fmt.Errorf("%w: key %q of Secret %s: %v", errBadTalosconfig, ref.Key, ref.Name, err)
	}
	return creds, nil
}

// resetNode asks the unmanaged node to reset as the reclaim says, once it
// reports the system UUID read when the reclaim began: every node of its
// cluster accepts the talosconfig, and the address may have moved to another.
func (r *Reconciler) resetNode(ctx context.Context, rc *v1alpha1.MachineReclaim) error {
	creds, err := r.talosconfig(ctx, rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	node, err := r.Dialer.Configured(ctx, rc.Status.Address, creds)
	if err != nil {
		return err
	}
	defer func() { _ = node.Close() }()
	if want := rc.Status.SystemUUID; want != "" {
		facts, err := node.Facts(ctx)
		if err != nil {
			return err
		}
		if facts.UUID != want {
			return &notThisNodeError{msg: fmt.Sprintf("the node answering at %s with the talosconfig reports system UUID %s, not %s, the one read when the reclaim began",
				rc.Status.Address, quoted(facts.UUID), want)}
		}
	}
	req := talos.ResetRequest{Graceful: graceful(rc), Mode: talos.WipeAll}
	if rc.Spec.Wipe == v1alpha1.WipeModeSystemDisk {
		req.Mode = talos.WipeSystemDisk
	}
	return node.Reset(ctx, req)
}

// reach checks that the node at address answers over mutual TLS with creds,
// and returns what it reports.
func (r *Reconciler) reach(ctx context.Context, address string, creds talos.Credentials) (*talos.Facts, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	node, err := r.Dialer.Configured(ctx, address, creds)
	if err != nil {
		return nil, err
	}
	defer func() { _ = node.Close() }()
	return node.Facts(ctx)
}

// deleteTalosconfig deletes the talosconfig Secret of an unmanaged reclaim,
// if it is still the one of type ichor.dev/talosconfig.
func (r *Reconciler) deleteTalosconfig(ctx context.Context, rc *v1alpha1.MachineReclaim) error {
	if rc.Spec.Unmanaged == nil {
		return nil
	}
	ref := rc.Spec.Unmanaged.TalosconfigSecretRef
	var secret corev1.Secret
	if err := r.Secrets.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: ref.Name}, &secret); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("read Secret %s: %w", ref.Name, err)
	}
	// Only the Secret handed over: of the type, and there before the
	// reclaim started (not one made for a later reclaim of the same name).
	if secret.Type != v1alpha1.SecretTypeTalosconfig || rc.Status.StartedAt == nil || secret.CreationTimestamp.After(rc.Status.StartedAt.Time) {
		return nil
	}
	uid := secret.UID
	if err := r.Client.Delete(ctx, &secret, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Secret %s: %w", ref.Name, err)
	}
	events.Record(r.Recorder, rc, nil, v1alpha1.EventTalosconfigDeleted, "DeleteTalosconfig",
		"Deleted Secret %s: its talosconfig was for this reset only", ref.Name)
	return nil
}

// notThisNodeError says the node answering is not the one the reclaim
// resets; nothing was sent to it.
type notThisNodeError struct{ msg string }

func (e *notThisNodeError) Error() string { return e.msg }

// maintenance says whether the reclaim's node answers in maintenance mode at
// its address: ours when it presents spec.expectedFingerprint (if set) and
// reports the system UUID read before the reset (if one was); other says why
// a node in maintenance mode that answers is another. A certificate other
// than the expected one says nothing yet: the node may still serve its
// cluster's, before its reset ends.
func (r *Reconciler) maintenance(ctx context.Context, rc *v1alpha1.MachineReclaim) (ours bool, other string) {
	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	pin := talos.Observe()
	if fp := rc.Spec.ExpectedFingerprint; fp != "" {
		var err error
		if pin, err = talos.Pinned(fp); err != nil {
			return false, ""
		}
	}
	node, err := r.Dialer.Maintenance(ctx, rc.Status.Address, pin)
	if err != nil {
		return false, ""
	}
	defer func() { _ = node.Close() }()
	facts, err := node.Facts(ctx)
	if err != nil {
		return false, ""
	}
	if want := rc.Status.SystemUUID; want != "" && facts.UUID != want {
		return false, fmt.Sprintf("the node in maintenance mode at %s reports system UUID %s, not %s, the one read before the reset",
			rc.Status.Address, quoted(facts.UUID), want)
	}
	return true, ""
}
