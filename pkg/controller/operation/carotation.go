package operation

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/events"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/talos"
)

// A ca-rotation replaces the cluster's Talos API CA, its Kubernetes CA, or
// both, in the three phases of Talos's own rotation (talosctl rotate-ca):
// the new CA accepted beside the old one, then issuing with the old one
// accepted, then alone. The phase is the cluster's (status.caRotation),
// and every machine's config follows it: machineconfig renders machine.ca
// and machine.acceptedCAs, cluster.ca and cluster.acceptedCAs from the
// secrets in force (bundlestore.Load). The Talos API CA is a no-reboot
// change; the Kubernetes CA restarts kube-apiserver and the controller
// manager on each control plane (one at a time, under the disruption
// budget) and the kubelet on every node, which bootstraps a new client
// certificate once the old CA is dropped. The operation moves the cluster
// into each phase and checks every machine, control planes first, before
// the next phase: its node runs the phase's trust (its OSRoot, and its
// running config's cluster CAs) and answers a client certificate from the
// new Talos API CA; the Kubernetes API answers one from the new Kubernetes
// CA, every Node Ready. The controller signs with the new CAs from the
// second phase on, when every node accepts them, and trusts both while
// nodes move from one to the other. The new CAs wait in a Secret of their
// own; the bundle's Secret takes them when the last phase is done
// (finish).
//
// A rotation that fails stays where it stopped, every node trusting what
// its phase says (both CAs until the last phase): a new ca-rotation of the
// same CAs takes it over where it is, with the same new CAs.

// CARotationFieldManager owns a cluster's status.caRotation.
const CARotationFieldManager = v1alpha1.FieldManagerCARotation

// caPhaseActions are the steps' actions, by the phase each checks.
var caPhaseActions = map[v1alpha1.StepAction]v1alpha1.CARotationPhase{
	v1alpha1.ActionAcceptNewCA:    v1alpha1.CARotationAcceptNew,
	v1alpha1.ActionIssueFromNewCA: v1alpha1.CARotationIssueNew,
	v1alpha1.ActionDropOldCA:      v1alpha1.CARotationDropOld,
}

// caRotationSteps are every machine's step in each phase, phase by phase.
func caRotationSteps(_ *v1alpha1.TalosOperation, targets []*v1alpha1.TalosMachine) []v1alpha1.OperationStep {
	var steps []v1alpha1.OperationStep
	for _, action := range []v1alpha1.StepAction{v1alpha1.ActionAcceptNewCA, v1alpha1.ActionIssueFromNewCA, v1alpha1.ActionDropOldCA} {
		for _, m := range targets {
			steps = append(steps, v1alpha1.OperationStep{Machine: m.Name, Action: action, Phase: v1alpha1.OperationPending})
		}
	}
	return steps
}

// rotatesCAs are the CAs op rotates.
func rotatesCAs(op *v1alpha1.TalosOperation) (talosCA, kubernetesCA bool) {
	if r := op.Spec.CARotation; r != nil {
		return r.Talos == nil || *r.Talos, r.Kubernetes != nil && *r.Kubernetes
	}
	return true, false
}

// rotatedCAs names the CAs a rotation replaces, for people.
func rotatedCAs(talosCA, kubernetesCA bool) string {
	switch {
	case talosCA && kubernetesCA:
		return "Talos API and Kubernetes CAs"
	case kubernetesCA:
		return "Kubernetes CA"
	default:
		return "Talos API CA"
	}
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
	if talosCA, kubernetesCA := rotatesCAs(op); talosCA != cur.Talos || kubernetesCA != cur.Kubernetes {
		return fmt.Sprintf("TalosCluster %s is in phase %s of a rotation of its %s left by TalosOperation %s: "+
			"a ca-rotation that takes it over must rotate the same CAs", cluster.Name, cur.Phase, rotatedCAs(cur.Talos, cur.Kubernetes), cur.Operation), nil
	}
	if busy, err := r.rotatingElsewhere(ctx, op, cur.Operation); err != nil || !busy {
		return "", err
	}
	return fmt.Sprintf("TalosOperation %s is rotating TalosCluster %s's %s (phase %s)", cur.Operation, cluster.Name, rotatedCAs(cur.Talos, cur.Kubernetes), cur.Phase), nil
}

// startCARotationStep moves the cluster into the step's phase, if it is
// not there or further yet, and follows the machine's node into it. A dry
// run says what the phase would change and touches nothing. A Secret in
// the place of the new CAs that is not theirs fails the step.
func startCARotationStep(ctx context.Context, s *step) (ctrl.Result, error) {
	phase := caPhaseActions[s.record().Action]
	talosCA, kubernetesCA := rotatesCAs(s.x.op)
	what := describeCAPhase(phase, render.MachineRole(s.m) == v1alpha1.MachineRoleControlPlane, talosCA, kubernetesCA)
	if caRotationDryRun(s.x.op) {
		return s.done(ctx, "dry run: %s", what)
	}
	if err := s.r.enterCAPhase(ctx, s.x, phase); err != nil {
		return s.failOnRefusal(ctx, err)
	}
	if err := s.begin(ctx, "", "waiting for the node to take the config of phase %s: %s", phase, what); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.r.Options.StepPollInterval}, nil
}

// describeCAPhase says what a phase changes in a machine's config.
func describeCAPhase(phase v1alpha1.CARotationPhase, controlPlane, talosCA, kubernetesCA bool) string {
	var parts []string
	if talosCA {
		switch phase {
		case v1alpha1.CARotationAcceptNew:
			parts = append(parts, "machine.acceptedCAs gets the new Talos API CA; the old one still issues")
		case v1alpha1.CARotationIssueNew:
			if controlPlane {
				parts = append(parts, "machine.ca becomes the new Talos API CA with its key, machine.acceptedCAs the old CA")
			} else {
				parts = append(parts, "machine.ca becomes the new Talos API CA's certificate, machine.acceptedCAs the old CA")
			}
		default:
			parts = append(parts, "machine.acceptedCAs drops the old Talos API CA")
		}
	}
	if kubernetesCA {
		switch phase {
		case v1alpha1.CARotationAcceptNew:
			parts = append(parts, "cluster.acceptedCAs gets the new Kubernetes CA; the old one still issues")
		case v1alpha1.CARotationIssueNew:
			parts = append(parts, "cluster.ca becomes the new Kubernetes CA, cluster.acceptedCAs the old CA")
		default:
			parts = append(parts, "cluster.acceptedCAs drops the old Kubernetes CA; kubelets bootstrap new client certificates")
		}
		if controlPlane {
			parts = append(parts, "kube-apiserver and kube-controller-manager restart, the kubelet too (no reboot)")
		} else {
			parts = append(parts, "the kubelet restarts (no reboot)")
		}
	} else {
		parts = append(parts, "no reboot")
	}
	return strings.Join(parts, "; ")
}

// enterCAPhase records phase as the cluster's, for x's operation, unless
// the cluster is there or further already: a rotation never moves back.
// The new CAs are recorded with it: those of the rotation's Secret when it
// holds what the cluster records (a rotation taken over keeps its CAs),
// or, entering the first phase without them, new ones, whose digest is
// recorded before their Secret is written. Stopped in between, the
// rotation is in its first phase without its Secret, and the next step
// generates others. A Secret that is not the rotation's is refused, with
// a Warning Event on the cluster, and left as it is.
func (r *Reconciler) enterCAPhase(ctx context.Context, x *run, phase v1alpha1.CARotationPhase) error {
	cluster, err := r.cluster(ctx, x.op)
	if err != nil {
		return err
	}
	return r.refusedOnCluster(cluster, x.op, "RotateCA", r.enterCAPhaseOf(ctx, x, cluster, phase))
}

func (r *Reconciler) enterCAPhaseOf(ctx context.Context, x *run, cluster *v1alpha1.TalosCluster, phase v1alpha1.CARotationPhase) error {
	talosCA, kubernetesCA := rotatesCAs(x.op)
	return threePhases[*secretsbundle.RotationCAs]{
		rotation: "CA rotation", material: "CAs", secretName: secretsbundle.RotationSecretName,
		recorded: func(c *v1alpha1.TalosCluster) (string, v1alpha1.CARotationPhase, string, bool) {
			if cur := c.Status.CARotation; cur != nil {
				return cur.Operation, cur.Phase, cur.SecretDigest, true
			}
			return "", "", "", false
		},
		load: func(ctx context.Context, c *v1alpha1.TalosCluster) (*secretsbundle.RotationCAs, bool, error) {
			cas, err := bundlestore.LoadRotationCAs(ctx, r.Secrets, c)
			return cas, cas != nil, err
		},
		remove: func(ctx context.Context, c *v1alpha1.TalosCluster) error {
			return bundlestore.DeleteRotationCAs(ctx, r.Client, r.Secrets, c)
		},
		generate: func(_ context.Context, c *v1alpha1.TalosCluster) (*secretsbundle.RotationCAs, error) {
			return secretsbundle.NewRotationCAs(c, talosCA, kubernetesCA, r.Now())
		},
		digestOf: func(cas *secretsbundle.RotationCAs) string { return cas.Digest },
		store: func(ctx context.Context, c *v1alpha1.TalosCluster, cas *secretsbundle.RotationCAs) error {
			return bundlestore.StoreRotationCAs(ctx, r.Client, c, cas)
		},
		record: func(ctx context.Context, c *v1alpha1.TalosCluster, op *v1alpha1.TalosOperation, phase v1alpha1.CARotationPhase, digest string) error {
			since := metav1.NewTime(r.Now())
			obj := ichorac.TalosCluster(c.Name, c.Namespace).WithResourceVersion(c.ResourceVersion).
				WithStatus(ichorac.TalosClusterStatus().WithCARotation(ichorac.CARotationStatus().
					WithOperation(op.Name).WithPhase(phase).WithSince(since).WithTalos(talosCA).WithKubernetes(kubernetesCA).
					WithSecretDigest(digest)))
			if err := r.Client.Status().Apply(ctx, obj, client.FieldOwner(CARotationFieldManager), client.ForceOwnership); err != nil {
				return err
			}
			events.Record(r.Recorder, c, op, v1alpha1.EventCARotationPhase, "RotateCA",
				"TalosOperation %s moved the rotation of the %s into phase %s", op.Name, rotatedCAs(talosCA, kubernetesCA), phase)
			return nil
		},
	}.enter(ctx, x, cluster, phase)
}

// followCARotationStep waits for the machine's node to run the trust in
// force (what the cluster's phase says) of each CA the rotation replaces,
// then checks the new CAs work: the node answers a client certificate
// from the new Talos API CA, and the Kubernetes API one from the new
// Kubernetes CA, trusting only the CAs in force.
func followCARotationStep(ctx context.Context, s *step) (ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	phase := caPhaseActions[s.record().Action]
	next, err := s.newCAs(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if next == nil {
		return s.failed(ctx, "the new CAs' Secret %s is gone", secretsbundle.RotationSecretName(s.cluster))
	}
	var said []string
	for _, follow := range []struct {
		rotated bool
		check   func(context.Context, *x509.PEMEncodedCertificateAndKey) (string, string, error)
		ca      *x509.PEMEncodedCertificateAndKey
	}{{next.Talos != nil, s.followTalosCA, next.Talos}, {next.Kubernetes != nil, s.followKubernetesCA, next.Kubernetes}} {
		if !follow.rotated {
			continue
		}
		done, waiting, err := follow.check(cctx, follow.ca)
		if err != nil {
			return ctrl.Result{}, err
		}
		if waiting != "" {
			if s.rolloutTimedOut() {
				return s.failed(ctx, "the node is not in phase %s after %s: %s; the cluster stays in phase %s, every node trusting its CAs",
					phase, s.r.Options.StepTimeout, waiting, phase)
			}
			if c := s.rolloutTurn(); c != "" {
				waiting += "; " + c
			}
			return s.wait("waiting for the node to take the config of phase %s: %s", phase, waiting)
		}
		said = append(said, done)
	}
	return s.done(ctx, "the node runs phase %s: %s", phase, strings.Join(said, "; "))
}

// newCAs are the rotation's new CAs: in its first phase, those waiting in
// the rotation's Secret; from the second on, and once it ended, those that
// issue in force.
func (s *step) newCAs(ctx context.Context) (*secretsbundle.RotationCAs, error) {
	talosCA, kubernetesCA := rotatesCAs(s.x.op)
	if r := s.cluster.Status.CARotation; r != nil && r.Phase == v1alpha1.CARotationAcceptNew {
		return bundlestore.LoadRotationCAs(ctx, s.r.Secrets, s.cluster)
	}
	next := &secretsbundle.RotationCAs{}
	if talosCA {
		next.Talos = s.bundle.Certs.OS
	}
	if kubernetesCA {
		next.Kubernetes = s.bundle.Certs.K8s
	}
	return next, nil
}

// followTalosCA checks the node runs the Talos API CAs in force (its
// OSRoot) and answers a client certificate from next. It says what it
// found, or what it waits for.
func (s *step) followTalosCA(ctx context.Context, next *x509.PEMEncodedCertificateAndKey) (done, waiting string, _ error) {
	got, err := s.node.TalosCA(ctx)
	if err != nil {
		return "", fmt.Sprintf("the node's Talos API does not answer: %v", err), nil
	}
	if msg := trustDiffers(got, s.bundle); msg != "" {
		return "", "Talos API CAs: " + msg, nil
	}
	if err := s.probe(ctx, next); err != nil {
		return "", fmt.Sprintf("the node does not answer a client certificate from the new Talos API CA yet: %v", err), nil
	}
	trust := fmt.Sprintf("accepting %d CAs", len(got.Accepted))
	if got.Issuing != nil {
		which := "old"
		if bytes.Equal(got.Issuing, next.Crt) {
			which = "new"
		}
		trust = fmt.Sprintf("issuing from the %s CA, %s", which, trust)
	}
	return fmt.Sprintf("Talos API %s, answering a client certificate from the new CA", trust), "", nil
}

// trustDiffers says how the node's trust differs from the secrets in
// force, or "": it accepts their Talos API CA and the accepted ones,
// nothing else, and a control plane issues from the former (a worker's
// certificate comes from a control plane's trustd).
func trustDiffers(got *talos.TalosCA, in *secretsbundle.Secrets) string {
	return casDiffer(got, in.Certs.OS.Crt, in.TalosAccepted)
}

// casDiffer says how got differs from a CA issuing from issuing and
// accepting it and accepted, or "".
func casDiffer(got *talos.TalosCA, issuing []byte, accepted [][]byte) string {
	want := append([][]byte{issuing}, accepted...)
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
	case got.Issuing != nil && !bytes.Equal(got.Issuing, issuing):
		return "it issues from another CA than the phase's"
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
	if cur := cluster.Status.CARotation; cur != nil && cur.Operation == x.op.Name {
		next, err := bundlestore.LoadRotationCAs(ctx, r.Secrets, cluster)
		if err != nil {
			return err
		}
		if next == nil {
			return fmt.Errorf("TalosCluster %s is at the end of a CA rotation, but Secret %s with the new CAs is gone: "+
				"recreate it from a copy, or restore the CAs by hand", cluster.Name, secretsbundle.RotationSecretName(cluster))
		}
		if err := bundlestore.StoreCAs(ctx, r.Client, r.Secrets, cluster, next); err != nil {
			return err
		}
		// The rotation ends, and its new admin credentials may be
		// downloaded once (talosclusters/credentials).
		patch := client.MergeFromWithOptions(cluster.DeepCopy(), client.MergeFromWithOptimisticLock{})
		cluster.Status.CARotation = nil
		cluster.Status.Credentials = &v1alpha1.ClusterCredentialsStatus{Rotation: x.op.Name, RotatedAt: metav1.NewTime(r.Now())}
		if cur.Kubernetes && next.Kubernetes != nil {
			cluster.Status.KubernetesCA = string(next.Kubernetes.Crt)
		}
		if err := r.Client.Status().Patch(ctx, cluster, patch); err != nil {
			return fmt.Errorf("end TalosCluster %s's CA rotation: %w", cluster.Name, err)
		}
		var old []string
		if cur.Talos {
			old = append(old, "talosconfigs")
		}
		if cur.Kubernetes {
			old = append(old, "kubeconfigs")
		}
		events.Record(r.Recorder, cluster, x.op, v1alpha1.EventCARotated, "RotateCA",
			"TalosOperation %s rotated the %s: every node trusts the new CAs alone, and the secrets bundle holds them; %s from the old CAs no longer work; an admin downloads the new credentials once (talosclusters/credentials)",
			x.op.Name, rotatedCAs(cur.Talos, cur.Kubernetes), strings.Join(old, " and "))
	}
	// The rotation's Secret goes once the bundle holds its CAs; a Secret
	// that is not the rotation's is not the rotation's to delete.
	return leaveRefused(ctx, bundlestore.DeleteRotationCAs(ctx, r.Client, r.Secrets, cluster))
}
