package reclaim

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/controller/intake"
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

// resetNode asks the unmanaged node to reset as the reclaim says.
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
	req := talos.ResetRequest{Graceful: graceful(rc), Mode: talos.WipeAll}
	if rc.Spec.Wipe == v1alpha1.WipeModeSystemDisk {
		req.Mode = talos.WipeSystemDisk
	}
	return node.Reset(ctx, req)
}

// reach checks that the node at address answers over mutual TLS with creds.
func (r *Reconciler) reach(ctx context.Context, address string, creds talos.Credentials) error {
	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	node, err := r.Dialer.Configured(ctx, address, creds)
	if err != nil {
		return err
	}
	defer func() { _ = node.Close() }()
	_, err = node.Facts(ctx)
	return err
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
	r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, EventSecretGone, "DeleteTalosconfig",
		"Deleted Secret %s: its talosconfig was for this reset only", ref.Name)
	return nil
}

// inMaintenance reports whether a node in maintenance mode answers at address.
func (r *Reconciler) inMaintenance(ctx context.Context, address string) bool {
	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	return intake.InMaintenance(ctx, r.Dialer, address)
}
