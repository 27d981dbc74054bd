package operation

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/controller/clustersecrets"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// A ca-rotation replaces the cluster's Talos API CA in the three phases of
// Talos's own rotation (talosctl rotate-ca): the new CA accepted beside
// the old one, then issuing with the old one accepted, then alone. The
// phase is the cluster's (status.caRotation), and every machine's config
// follows it: machineconfig renders machine.ca and machine.acceptedCAs
// from the secrets in force (clustersecrets.Load), a no-reboot change.
// The operation moves the cluster into each phase and checks every
// machine, control planes first, before the next phase: its node runs the
// phase's trust (read from its OSRoot) and answers a client certificate
// from the new CA. The controller signs with the new CA from the second
// phase on, when every node accepts it, and trusts both CAs while nodes
// move from one to the other. The new CA waits in a Secret of its own;
// the bundle's Secret takes it when the last phase is done (finish).
//
// A rotation that fails stays where it stopped, every node trusting what
// its phase says (both CAs until the last phase): a new ca-rotation takes
// it over where it is, with the same new CA.

// EventTalosCARotated, on the TalosCluster: its bundle holds the new CA.
const EventTalosCARotated = "TalosCARotated"

// CARotationFieldManager owns a cluster's status.caRotation.
const CARotationFieldManager = "ichor-ca-rotation"

// caPhaseActions are the steps' actions, by the phase each checks.
var caPhaseActions = map[v1alpha1.StepAction]v1alpha1.CARotationPhase{
	v1alpha1.ActionAcceptNewCA:    v1alpha1.CARotationAcceptNew,
	v1alpha1.ActionIssueFromNewCA: v1alpha1.CARotationIssueNew,
	v1alpha1.ActionDropOldCA:      v1alpha1.CARotationDropOld,
}

// caRotationSteps are every machine's step in each phase, phase by phase.
func caRotationSteps(targets []*v1alpha1.TalosMachine) []v1alpha1.OperationStep {
	var steps []v1alpha1.OperationStep
	for _, action := range []v1alpha1.StepAction{v1alpha1.ActionAcceptNewCA, v1alpha1.ActionIssueFromNewCA, v1alpha1.ActionDropOldCA} {
		for _, m := range targets {
			steps = append(steps, v1alpha1.OperationStep{Machine: m.Name, Action: action, Phase: v1alpha1.OperationPending})
		}
	}
	return steps
}

// caRotationDryRun reports whether op only says what it would do.
func caRotationDryRun(op *v1alpha1.TalosOperation) bool {
	return op.Spec.CARotation != nil && op.Spec.CARotation.DryRun
}

// checkCARotation refuses a rotation while another one runs; one that a
// failed or deleted operation left is taken over.
func (r *Reconciler) checkCARotation(ctx context.Context, op *v1alpha1.TalosOperation, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error) {
	if len(targets) == 0 {
		return fmt.Sprintf("TalosCluster %s has no configured machine", cluster.Name), nil
	}
	cur := cluster.Status.CARotation
	if cur == nil || cur.Operation == op.Name {
		return "", nil
	}
	var other v1alpha1.TalosOperation
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: cur.Operation}, &other)
	if client.IgnoreNotFound(err) != nil {
		return "", err
	}
	if err == nil && other.Status.Phase != v1alpha1.OperationFailed && other.Status.Phase != v1alpha1.OperationSucceeded {
		return fmt.Sprintf("TalosOperation %s is rotating TalosCluster %s's Talos API CA (phase %s)", cur.Operation, cluster.Name, cur.Phase), nil
	}
	return "", nil
}

// startCARotationStep moves the cluster into the step's phase, if it is
// not there or further yet, and follows the machine's node into it. A dry
// run says what the phase would change and touches nothing.
func startCARotationStep(ctx context.Context, s *step) (ctrl.Result, error) {
	phase := caPhaseActions[s.record().Action]
	if caRotationDryRun(s.x.op) {
		return s.done(ctx, "dry run: %s", describeCAPhase(phase, render.MachineRole(s.m) == v1alpha1.MachineRoleControlPlane))
	}
	if err := s.r.enterCAPhase(ctx, s.x, phase); err != nil {
		return ctrl.Result{}, err
	}
	if err := s.begin(ctx, "", "waiting for the node to take the config of phase %s: %s", phase, describeCAPhase(phase, render.MachineRole(s.m) == v1alpha1.MachineRoleControlPlane)); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.r.Options.StepPollInterval}, nil
}

// describeCAPhase says what a phase changes in a machine's config.
func describeCAPhase(phase v1alpha1.CARotationPhase, controlPlane bool) string {
	switch phase {
	case v1alpha1.CARotationAcceptNew:
		return "machine.acceptedCAs gets the new Talos API CA; the old one still issues (no reboot)"
	case v1alpha1.CARotationIssueNew:
		if controlPlane {
			return "machine.ca becomes the new CA with its key, machine.acceptedCAs the old CA (no reboot)"
		}
		return "machine.ca becomes the new CA's certificate, machine.acceptedCAs the old CA (no reboot)"
	default:
		return "machine.acceptedCAs drops the old CA: the new one alone is trusted (no reboot)"
	}
}

// enterCAPhase records phase as the cluster's, for x's operation, unless
// the cluster is there or further already: a rotation never moves back.
// The first phase stores the new CA first, so that the secrets in force
// can be read as soon as the phase is.
func (r *Reconciler) enterCAPhase(ctx context.Context, x *run, phase v1alpha1.CARotationPhase) error {
	cluster, err := r.cluster(ctx, x.op)
	if err != nil {
		return err
	}
	cur := cluster.Status.CARotation
	if cur != nil && cur.Operation == x.op.Name && slices.Index(v1alpha1.CARotationPhases, cur.Phase) >= slices.Index(v1alpha1.CARotationPhases, phase) {
		return nil
	}
	if _, err := clustersecrets.EnsureRotationCA(ctx, r.Client, r.Secrets, cluster, x.op, r.Now()); err != nil {
		return err
	}
	if cur != nil && slices.Index(v1alpha1.CARotationPhases, cur.Phase) > slices.Index(v1alpha1.CARotationPhases, phase) {
		phase = cur.Phase // taken over where it is
	}
	since := metav1.NewTime(r.Now())
	obj := ichorac.TalosCluster(cluster.Name, cluster.Namespace).WithResourceVersion(cluster.ResourceVersion).
		WithStatus(ichorac.TalosClusterStatus().WithCARotation(ichorac.CARotationStatus().
			WithOperation(x.op.Name).WithPhase(phase).WithSince(since)))
	if err := r.Client.Status().Apply(ctx, obj, client.FieldOwner(CARotationFieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("move TalosCluster %s into phase %s of its Talos API CA rotation: %w", cluster.Name, phase, err)
	}
	r.Recorder.Eventf(cluster, x.op, corev1.EventTypeNormal, "TalosCARotationPhase", "RotateTalosCA",
		"TalosOperation %s moved the Talos API CA rotation into phase %s", x.op.Name, phase)
	// The secrets in force changed: read them again.
	x.cluster, x.bundle = nil, nil
	return nil
}

// followCARotationStep waits for the machine's node to run the trust in
// force (what the cluster's phase says), then checks it answers a client
// certificate from the new CA, trusting only the CAs in force.
func followCARotationStep(ctx context.Context, s *step) (ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	phase := caPhaseActions[s.record().Action]
	got, err := s.node.TalosCA(cctx)
	if err != nil {
		if s.timedOut() {
			return s.failed(ctx, "the node's Talos API did not answer within %s: %v; the cluster stays in phase %s, every node trusting its CAs", s.r.Options.StepTimeout, err, phase)
		}
		return s.wait("waiting for the node's Talos API: %v", err)
	}
	if msg := trustDiffers(got, s.bundle); msg != "" {
		if s.timedOut() {
			return s.failed(ctx, "the node does not run the Talos API CAs of phase %s after %s: %s; the cluster stays in phase %s", phase, s.r.Options.StepTimeout, msg, phase)
		}
		return s.wait("waiting for the node to take the config of phase %s: %s", phase, msg)
	}
	// From the second phase on, and once the rotation ended, the new CA
	// is the one that issues; before, it waits in its own Secret.
	next := s.bundle.Certs.OS
	if r := s.cluster.Status.CARotation; r != nil && r.Phase == v1alpha1.CARotationAcceptNew {
		if next, _, err = clustersecrets.LoadRotationCA(ctx, s.r.Secrets, s.cluster); err != nil {
			return ctrl.Result{}, err
		}
		if next == nil {
			return s.failed(ctx, "the new Talos API CA's Secret %s is gone", clustersecrets.RotationSecretName(s.cluster))
		}
	}
	if err := s.probe(cctx, next); err != nil {
		if s.timedOut() {
			return s.failed(ctx, "the node does not answer a client certificate from the new CA after %s: %v", s.r.Options.StepTimeout, err)
		}
		return s.wait("the node runs phase %s, but does not answer a client certificate from the new CA yet: %v", phase, err)
	}
	trust := fmt.Sprintf("accepting %d CAs", len(got.Accepted))
	if got.Issuing != nil {
		which := "old"
		if bytes.Equal(got.Issuing, next.Crt) {
			which = "new"
		}
		trust = fmt.Sprintf("issuing from the %s CA, %s", which, trust)
	}
	return s.done(ctx, "the node runs phase %s (%s) and answers a client certificate from the new CA", phase, trust)
}

// trustDiffers says how the node's trust differs from the secrets in
// force, or "": it accepts their Talos API CA and the accepted ones,
// nothing else, and a control plane issues from the former (a worker's
// certificate comes from a control plane's trustd).
func trustDiffers(got *talos.TalosCA, in *clustersecrets.Secrets) string {
	want := append([][]byte{in.Certs.OS.Crt}, in.TalosAccepted...)
	sameSet := func(a, b [][]byte) bool {
		for _, x := range a {
			if !slices.ContainsFunc(b, func(y []byte) bool { return bytes.Equal(x, y) }) {
				return false
			}
		}
		for _, y := range b {
			if !slices.ContainsFunc(a, func(x []byte) bool { return bytes.Equal(x, y) }) {
				return false
			}
		}
		return true
	}
	switch {
	case got.Issuing != nil && !bytes.Equal(got.Issuing, in.Certs.OS.Crt):
		return "its API certificate comes from another CA than the phase's"
	case !sameSet(got.Accepted, want):
		return fmt.Sprintf("it accepts %d CAs, the phase %d", len(got.Accepted), len(want))
	}
	return ""
}

// probe calls the node as os:reader with a certificate from the new CA,
// trusting only the CAs in force: what the cluster's clients do next.
func (s *step) probe(ctx context.Context, next *x509.PEMEncodedCertificateAndKey) error {
	issuer := &secrets.Bundle{Certs: &secrets.Certs{OS: next}}
	creds, err := talos.MintCredentials(issuer, role.MakeSet(role.Reader), s.r.Now(), time.Minute)
	if err != nil {
		return err
	}
	creds.CA = s.bundle.TalosCA()
	node, err := s.r.Dialer.Configured(ctx, s.m.Spec.Address, creds)
	if err != nil {
		return err
	}
	defer func() { _ = node.Close() }()
	_, err = node.Version(ctx)
	return err
}

// finishCARotation writes the new CA into the bundle's Secret, ends the
// cluster's rotation and deletes the new CA's own Secret, in that order:
// at any point between, the secrets in force are the new CA alone. It may
// run again after a restart.
func (r *Reconciler) finishCARotation(ctx context.Context, x *run) error {
	if caRotationDryRun(x.op) {
		return nil
	}
	cluster, err := r.cluster(ctx, x.op)
	if err != nil {
		return err
	}
	next, _, err := clustersecrets.LoadRotationCA(ctx, r.Secrets, cluster)
	if err != nil {
		return err
	}
	if next != nil {
		if err := clustersecrets.StoreTalosCA(ctx, r.Client, r.Secrets, cluster, next); err != nil {
			return err
		}
	}
	if cur := cluster.Status.CARotation; cur != nil && cur.Operation == x.op.Name {
		// The rotation ends, and its new admin credentials may be
		// downloaded once (talosclusters/credentials).
		patch := client.MergeFromWithOptions(cluster.DeepCopy(), client.MergeFromWithOptimisticLock{})
		cluster.Status.CARotation = nil
		cluster.Status.Credentials = &v1alpha1.ClusterCredentialsStatus{Rotation: x.op.Name, RotatedAt: metav1.NewTime(r.Now())}
		if err := r.Client.Status().Patch(ctx, cluster, patch); err != nil {
			return fmt.Errorf("end TalosCluster %s's Talos API CA rotation: %w", cluster.Name, err)
		}
		r.Recorder.Eventf(cluster, x.op, corev1.EventTypeNormal, EventTalosCARotated, "RotateTalosCA",
			"TalosOperation %s rotated the Talos API CA: every node trusts the new CA alone, and the secrets bundle holds it; talosconfigs from the old CA no longer work; an admin downloads the new credentials once (talosclusters/credentials)", x.op.Name)
	}
	return clustersecrets.DeleteRotationCA(ctx, r.Client, r.Secrets, cluster)
}
