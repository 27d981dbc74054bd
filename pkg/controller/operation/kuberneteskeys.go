package operation

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/disruption"
	"ichor.dev/ichor/pkg/events"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/workload"
)

// A key-rotation of Kubernetes keys replaces the service-account signing
// key, the secretbox key that encrypts Secrets at rest, or both, on a
// cluster of the v1.14 contract, whose KubeServiceAccountConfig accepts
// keys besides the one that signs and whose KubeEtcdEncryptionConfig takes
// several keys. It moves through the three phases of a CA rotation
// (status.kubernetesKeyRotation): the new keys accepted beside the old
// ones, then signing and encrypting with the old ones accepted, then
// alone. Only control planes run kube-apiserver, so only they change: the
// change restarts kube-apiserver, which machineconfig rolls out one
// control plane at a time under the cluster's disruption budget, and a
// step is done once its node runs the phase's keys and its kube-apiserver
// serves them (machineconfig holds the budget until then). Before the old
// secretbox key is dropped, every Secret is written again: kube-apiserver
// encrypts what it writes with the first key, so none is left that only
// the old key reads. A token signed with the old service-account key
// works until the last phase.
//
// The new keys wait in a Secret of their own (secretsbundle.RotationKeys),
// recorded by digest first, as a CA rotation's CAs; the bundle takes them
// at the end, with the new secretbox key's name (status.
// secretsEncryptionKeyName), in the write that ends the rotation.

// KubernetesKeysFieldManager owns a cluster's status.kubernetesKeyRotation.
const KubernetesKeysFieldManager = v1alpha1.FieldManagerKubernetesKeys

// kubernetesKeyActions are the steps' actions, by the phase each checks.
var kubernetesKeyActions = map[v1alpha1.StepAction]v1alpha1.CARotationPhase{
	v1alpha1.ActionAcceptNewKeys:    v1alpha1.CARotationAcceptNew,
	v1alpha1.ActionIssueFromNewKeys: v1alpha1.CARotationIssueNew,
	v1alpha1.ActionDropOldKeys:      v1alpha1.CARotationDropOld,
}

// rotatesKubernetesKeys reports whether op rotates the service-account key
// or the secretbox key (then not the disk-encryption key: validation keeps
// them apart).
func rotatesKubernetesKeys(op *v1alpha1.TalosOperation) (serviceAccount, encryption bool) {
	if op.Spec.KeyRotation == nil {
		return false, false
	}
	keys := op.Spec.KeyRotation.Keys
	return slices.Contains(keys, v1alpha1.KeyServiceAccount), slices.Contains(keys, v1alpha1.KeySecretsEncryption)
}

// kubernetesKeysOf reports whether op is a key-rotation of Kubernetes keys.
func kubernetesKeysOf(op *v1alpha1.TalosOperation) bool {
	sa, enc := rotatesKubernetesKeys(op)
	return sa || enc
}

// rotatedKeys names the keys a rotation replaces, for people.
func rotatedKeys(serviceAccount, encryption bool) string {
	switch {
	case serviceAccount && encryption:
		return "service-account and secrets-encryption keys"
	case serviceAccount:
		return "service-account key"
	default:
		return "secrets-encryption key"
	}
}

// kubernetesKeySteps are every control plane's step in each phase.
func kubernetesKeySteps(targets []*v1alpha1.TalosMachine) []v1alpha1.OperationStep {
	var steps []v1alpha1.OperationStep
	for _, action := range []v1alpha1.StepAction{v1alpha1.ActionAcceptNewKeys, v1alpha1.ActionIssueFromNewKeys, v1alpha1.ActionDropOldKeys} {
		for _, m := range targets {
			if render.MachineRole(m) == v1alpha1.MachineRoleControlPlane {
				steps = append(steps, v1alpha1.OperationStep{Machine: m.Name, Action: action, Phase: v1alpha1.OperationPending})
			}
		}
	}
	return steps
}

// checkKubernetesKeys refuses a rotation on a cluster whose contract has one
// key of each, during a CA rotation, and while another key rotation runs;
// one that a failed or deleted operation left is taken over, if it
// rotates the same keys.
func (r *Reconciler) checkKubernetesKeys(ctx context.Context, op *v1alpha1.TalosOperation, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error) {
	sa, enc := rotatesKubernetesKeys(op)
	contract, rotates, err := render.KubernetesKeysRotate(cluster.Spec.TalosVersion)
	if err != nil {
		return fmt.Sprintf("TalosCluster %s: %v", cluster.Name, err), nil
	}
	switch {
	case len(kubernetesKeySteps(targets)) == 0:
		return fmt.Sprintf("TalosCluster %s has no configured control plane", cluster.Name), nil
	case !rotates:
		return fmt.Sprintf("TalosCluster %s renders the %s contract, whose control planes take one service-account key and one secretbox key, "+
			"with no place for another: move spec.talosVersion to v1.14 or later (a contract move), then rotate the %s", cluster.Name, contract, rotatedKeys(sa, enc)), nil
	case cluster.Status.CARotation != nil:
		return fmt.Sprintf("TalosCluster %s is in phase %s of a CA rotation left by TalosOperation %s: finish it with a ca-rotation first",
			cluster.Name, cluster.Status.CARotation.Phase, cluster.Status.CARotation.Operation), nil
	}
	for _, m := range targets {
		if a := m.Status.AppliedConfig; render.MachineRole(m) == v1alpha1.MachineRoleControlPlane && a != nil && a.Contract != "" && a.Contract != contract {
			return fmt.Sprintf("TalosMachine %s still runs the %s contract: wait for the contract move to reach every control plane", m.Name, a.Contract), nil
		}
	}
	cur := cluster.Status.KubernetesKeyRotation
	if cur == nil || cur.Operation == op.Name {
		return "", nil
	}
	if sa != cur.ServiceAccount || enc != cur.SecretsEncryption {
		return fmt.Sprintf("TalosCluster %s is in phase %s of a rotation of its %s left by TalosOperation %s: "+
			"a key-rotation that takes it over must rotate the same keys", cluster.Name, cur.Phase, rotatedKeys(cur.ServiceAccount, cur.SecretsEncryption), cur.Operation), nil
	}
	if busy, err := r.rotatingElsewhere(ctx, op, cur.Operation); err != nil || !busy {
		return "", err
	}
	return fmt.Sprintf("TalosOperation %s is rotating TalosCluster %s's %s (phase %s)", cur.Operation, cluster.Name, rotatedKeys(cur.ServiceAccount, cur.SecretsEncryption), cur.Phase), nil
}

// startKubernetesKeysStep moves the cluster into the step's phase, if it is
// not there or further yet, and follows the control plane into it. The
// first step of the last phase writes every Secret again first. A dry run
// says what the phase would change and touches nothing.
func startKubernetesKeysStep(ctx context.Context, s *step) (ctrl.Result, error) {
	phase := kubernetesKeyActions[s.record().Action]
	sa, enc := rotatesKubernetesKeys(s.x.op)
	what := describeKeyPhase(phase, sa, enc)
	if keyRotationDryRun(s.x.op) {
		return s.done(ctx, "dry run: %s", what)
	}
	if cur := s.cluster.Status.KubernetesKeyRotation; sa && phase == v1alpha1.CARotationDropOld && cur != nil && cur.Phase == v1alpha1.CARotationIssueNew {
		if until := graceEnds(s.x.op); s.r.Now().Before(until) {
			return s.waitFor(v1alpha1.OperationReasonKeyGracePeriod,
				"the old service-account key stays accepted until %s (keyRotation.serviceAccountGracePeriod), so that the kubelets renew every pod's token with the new key",
				until.UTC().Format(time.RFC3339))
		}
	}
	if cur := s.cluster.Status.KubernetesKeyRotation; enc && phase == v1alpha1.CARotationDropOld && cur != nil && cur.Phase == v1alpha1.CARotationIssueNew {
		written, err := workload.RewriteSecrets(ctx, s.bundle.Bundle, s.cluster.Spec.ControlPlane.Endpoint, s.r.Now(), s.bundle.KubernetesAccepted...)
		if err != nil {
			if s.timedOut() {
				return s.failed(ctx, "writing every Secret again: %v; the cluster stays in phase %s, every control plane reading both keys", err, cur.Phase)
			}
			return s.wait("writing every Secret again, so none needs the old secretbox key: %v", err)
		}
		events.Record(s.r.Recorder, s.cluster, s.x.op, v1alpha1.EventSecretsRewritten, "RotateKeys",
			"TalosOperation %s wrote all %d Secrets again, encrypted with the new secretbox key, before the old key is dropped", s.x.op.Name, written)
		log.FromContext(ctx).Info("Wrote every Secret again", "secrets", written)
		what = fmt.Sprintf("wrote all %d Secrets again with the new key; %s", written, what)
	}
	if err := s.r.enterKeyPhase(ctx, s.x, phase); err != nil {
		return s.failOnRefusal(ctx, err)
	}
	if err := s.begin(ctx, "", "waiting for the control plane to serve the keys of phase %s: %s", phase, what); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.r.Options.StepPollInterval}, nil
}

// graceEnds is when op may drop the old service-account key: its grace
// period after the last control plane signed with the new one.
func graceEnds(op *v1alpha1.TalosOperation) time.Time {
	var signed time.Time
	for _, st := range op.Status.Steps {
		if st.Action == v1alpha1.ActionIssueFromNewKeys && st.CompletedAt != nil && st.CompletedAt.After(signed) {
			signed = st.CompletedAt.Time
		}
	}
	grace := v1alpha1.DefaultServiceAccountGracePeriod
	if g := op.Spec.KeyRotation.ServiceAccountGracePeriod; g != nil {
		grace = g.Duration
	}
	return signed.Add(grace)
}

// describeKeyPhase says what a phase changes in a control plane's config.
func describeKeyPhase(phase v1alpha1.CARotationPhase, serviceAccount, encryption bool) string {
	var parts []string
	if serviceAccount {
		switch phase {
		case v1alpha1.CARotationAcceptNew:
			parts = append(parts, "KubeServiceAccountConfig accepts the new key; the old one still signs")
		case v1alpha1.CARotationIssueNew:
			parts = append(parts, "the new key signs service-account tokens, the old one still accepted")
		default:
			parts = append(parts, "the old service-account key is no longer accepted: tokens it signed stop working")
		}
	}
	if encryption {
		switch phase {
		case v1alpha1.CARotationAcceptNew:
			parts = append(parts, "KubeEtcdEncryptionConfig reads with the new secretbox key; the old one still encrypts")
		case v1alpha1.CARotationIssueNew:
			parts = append(parts, "the new secretbox key encrypts, the old one still reads")
		default:
			parts = append(parts, "the old secretbox key is dropped")
		}
	}
	return strings.Join(append(parts, "kube-apiserver restarts (no reboot)"), "; ")
}

// enterKeyPhase records phase as the cluster's, for x's operation, unless
// the cluster is there or further already: a rotation never moves back.
// The new keys are those of the rotation's Secret when it holds what the
// cluster records, or, entering the first phase without them, new ones,
// whose digest is recorded before their Secret is written. A Secret that
// is not the rotation's is refused, with a Warning Event on the cluster.
func (r *Reconciler) enterKeyPhase(ctx context.Context, x *run, phase v1alpha1.CARotationPhase) error {
	cluster, err := r.cluster(ctx, x.op)
	if err != nil {
		return err
	}
	return r.refusedOnCluster(cluster, x.op, "RotateKeys", r.enterKeyPhaseOf(ctx, x, cluster, phase))
}

func (r *Reconciler) enterKeyPhaseOf(ctx context.Context, x *run, cluster *v1alpha1.TalosCluster, phase v1alpha1.CARotationPhase) error {
	sa, enc := rotatesKubernetesKeys(x.op)
	return threePhases[*secretsbundle.RotationKeys]{
		rotation: "key rotation", material: "keys", secretName: secretsbundle.KeysSecretName,
		recorded: func(c *v1alpha1.TalosCluster) (string, v1alpha1.CARotationPhase, string, bool) {
			if cur := c.Status.KubernetesKeyRotation; cur != nil {
				return cur.Operation, cur.Phase, cur.SecretDigest, true
			}
			return "", "", "", false
		},
		load: func(ctx context.Context, c *v1alpha1.TalosCluster) (*secretsbundle.RotationKeys, bool, error) {
			keys, err := bundlestore.LoadRotationKeys(ctx, r.Secrets, c)
			return keys, keys != nil, err
		},
		remove: func(ctx context.Context, c *v1alpha1.TalosCluster) error {
			return bundlestore.DeleteRotationKeys(ctx, r.Client, r.Secrets, c)
		},
		generate: func(ctx context.Context, c *v1alpha1.TalosCluster) (*secretsbundle.RotationKeys, error) {
			bundle, err := bundlestore.Load(ctx, r.Secrets, c)
			if err != nil {
				return nil, err
			}
			return secretsbundle.NewRotationKeys(c, bundle.Bundle, sa, enc)
		},
		digestOf: func(keys *secretsbundle.RotationKeys) string { return keys.Digest },
		store: func(ctx context.Context, c *v1alpha1.TalosCluster, keys *secretsbundle.RotationKeys) error {
			return bundlestore.StoreRotationKeys(ctx, r.Client, c, keys)
		},
		record: func(ctx context.Context, c *v1alpha1.TalosCluster, op *v1alpha1.TalosOperation, phase v1alpha1.CARotationPhase, digest string) error {
			since := metav1.NewTime(r.Now())
			obj := ichorac.TalosCluster(c.Name, c.Namespace).WithResourceVersion(c.ResourceVersion).
				WithStatus(ichorac.TalosClusterStatus().WithKubernetesKeyRotation(ichorac.KubernetesKeyRotationStatus().
					WithOperation(op.Name).WithPhase(phase).WithSince(since).WithServiceAccount(sa).WithSecretsEncryption(enc).
					WithSecretDigest(digest)))
			if err := r.Client.Status().Apply(ctx, obj, client.FieldOwner(KubernetesKeysFieldManager), client.ForceOwnership); err != nil {
				return err
			}
			events.Record(r.Recorder, c, op, v1alpha1.EventKeyRotationPhase, "RotateKeys",
				"TalosOperation %s moved the rotation of the %s into phase %s", op.Name, rotatedKeys(sa, enc), phase)
			return nil
		},
	}.enter(ctx, x, cluster, phase)
}

// followKubernetesKeysStep waits for the control plane's node to run the
// keys in force (what the cluster's phase says) and its kube-apiserver to
// serve them: machineconfig holds the cluster's budget for the restart
// until the static pod runs the node's config and is Ready.
func followKubernetesKeysStep(ctx context.Context, s *step) (ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	phase := kubernetesKeyActions[s.record().Action]
	if r := s.cluster.Status.KubernetesKeyRotation; r != nil {
		phase = r.Phase // a rotation taken over further on
	}
	waiting, err := s.keysDiffer(cctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if waiting == "" && disruption.HeldBy(s.cluster, s.m) {
		waiting = "kube-apiserver restarts with them"
	}
	if waiting != "" {
		if s.rolloutTimedOut() {
			return s.failed(ctx, "the control plane is not in phase %s after %s: %s; the cluster stays in phase %s, every control plane accepting its keys",
				phase, s.r.Options.StepTimeout, waiting, phase)
		}
		if c := s.rolloutTurn(); c != "" {
			waiting += "; " + c
		}
		return s.wait("waiting for the control plane to serve the keys of phase %s: %s", phase, waiting)
	}
	return s.done(ctx, "kube-apiserver serves the keys of phase %s: %d service-account keys accepted, %d secretbox keys",
		phase, 1+len(s.bundle.ServiceAccountAccepted), max(len(s.bundle.EncryptionKeys), 1))
}

// keysDiffer says how the node's running config differs from the keys in
// force, or "".
func (s *step) keysDiffer(ctx context.Context) (string, error) {
	data, err := s.node.Config(ctx)
	if err != nil {
		return fmt.Sprintf("the node's Talos API does not answer: %v", err), nil
	}
	got, err := render.ConfiguredKubernetesKeys(data)
	if err != nil {
		return err.Error(), nil
	}
	sa, enc := rotatesKubernetesKeys(s.x.op)
	if sa {
		if !bytes.Equal(bytes.TrimSpace(got.Issuing), bytes.TrimSpace(s.bundle.Certs.K8sServiceAccount.Key)) {
			return "its config signs service-account tokens with another key than the phase's", nil
		}
		if !slices.EqualFunc(got.Accepted, s.bundle.ServiceAccountAccepted, func(a, b []byte) bool { return bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) }) {
			return fmt.Sprintf("its config accepts %d other service-account keys, the phase %d", len(got.Accepted), len(s.bundle.ServiceAccountAccepted)), nil
		}
	}
	if enc {
		want := s.bundle.EncryptionKeys
		if !slices.Equal(got.Encryption, want) {
			names := func(keys []render.EncryptionKey) string {
				var out []string
				for _, k := range keys {
					out = append(out, k.Name)
				}
				return strings.Join(out, ", ")
			}
			return fmt.Sprintf("its config has secretbox keys [%s], the phase [%s]", names(got.Encryption), names(want)), nil
		}
	}
	return "", nil
}

// finishKubernetesKeys writes the new keys into the bundle's Secret, then
// ends the cluster's rotation and records the new secretbox key's name in
// one write, then deletes the new keys' own Secret: at any point between,
// the keys in force are the new ones alone. It may run again after a
// restart.
func (r *Reconciler) finishKubernetesKeys(ctx context.Context, x *run) error {
	if keyRotationDryRun(x.op) {
		return nil
	}
	cluster, err := r.cluster(ctx, x.op)
	if err != nil {
		return err
	}
	if cur := cluster.Status.KubernetesKeyRotation; cur != nil && cur.Operation == x.op.Name {
		next, err := bundlestore.LoadRotationKeys(ctx, r.Secrets, cluster)
		if err != nil {
			return err
		}
		if next == nil {
			return fmt.Errorf("TalosCluster %s is at the end of a key rotation, but Secret %s with the new keys is gone: "+
				"recreate it from a copy, or restore the keys by hand", cluster.Name, secretsbundle.KeysSecretName(cluster))
		}
		if err := bundlestore.StoreKeys(ctx, r.Client, r.Secrets, cluster, next); err != nil {
			return err
		}
		patch := client.MergeFromWithOptions(cluster.DeepCopy(), client.MergeFromWithOptimisticLock{})
		cluster.Status.KubernetesKeyRotation = nil
		if next.Encryption != nil {
			cluster.Status.SecretsEncryptionKeyName = next.Encryption.Name
		}
		if err := r.Client.Status().Patch(ctx, cluster, patch); err != nil {
			return fmt.Errorf("end TalosCluster %s's key rotation: %w", cluster.Name, err)
		}
		events.Record(r.Recorder, cluster, x.op, v1alpha1.EventKeysRotated, "RotateKeys",
			"TalosOperation %s rotated the %s: every control plane signs and encrypts with the new keys alone, and the secrets bundle holds them",
			x.op.Name, rotatedKeys(cur.ServiceAccount, cur.SecretsEncryption))
	}
	return leaveRefused(ctx, bundlestore.DeleteRotationKeys(ctx, r.Client, r.Secrets, cluster))
}
