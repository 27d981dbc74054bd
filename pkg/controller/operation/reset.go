package operation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/configstatus"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// A node-reset wipes the named machines' disks as Talos's reset modes do,
// one at a time under the disruption budget (a control plane only while
// etcd keeps its quorum without it), and brings each back into its
// cluster:
//
//   - wipe all or system-disk wipes the whole system disk (and, with all,
//     the user disks named): the node leaves etcd and is drained by Talos
//     first (graceful), and comes back in maintenance mode with a new
//     certificate. The step pins that certificate (intake.Repin),
//     only for a node at the machine's address reporting its system UUID,
//     forgets the machine's config so that it is installed again, and ends
//     when the machine is Ready again.
//   - wipe user-disks wipes only the disks named; the node keeps its config
//     and its etcd member. Ichor drains it first (graceful), since Talos's
//     graceful reset would take the member out of etcd while its data
//     stays, and the step ends when the node runs a new boot and its Node
//     is Ready.

// resetParams are op's node-reset parameters, defaulted.
func resetParams(op *v1alpha1.TalosOperation) v1alpha1.NodeResetParameters {
	p := v1alpha1.NodeResetParameters{Wipe: v1alpha1.WipeModeAll}
	if op.Spec.NodeReset != nil {
		p = *op.Spec.NodeReset
	}
	if p.Wipe == "" {
		p.Wipe = v1alpha1.WipeModeAll
	}
	return p
}

func gracefulReset(p v1alpha1.NodeResetParameters) bool { return p.Graceful == nil || *p.Graceful }

// wipesSystemDisk reports whether the reset takes the system disk, and with
// it the node's config.
func wipesSystemDisk(p v1alpha1.NodeResetParameters) bool {
	return p.Wipe != v1alpha1.WipeModeUserDisks
}

// resetRequest is the Talos reset of p.
func resetRequest(p v1alpha1.NodeResetParameters) talos.ResetRequest {
	r := talos.ResetRequest{Mode: talos.WipeAll, UserDisks: p.UserDisks}
	switch p.Wipe {
	case v1alpha1.WipeModeSystemDisk:
		r.Mode = talos.WipeSystemDisk
	case v1alpha1.WipeModeUserDisks:
		r.Mode = talos.WipeUserDisks
	}
	// With the system disk kept, Talos's graceful reset would remove the
	// member from etcd while its data stays: Ichor drains instead.
	r.Graceful = gracefulReset(p) && wipesSystemDisk(p)
	return r
}

// checkNodeReset refuses, before any step, a reset Ichor could not bring
// the machine back from, or one that would cost the cluster its etcd.
func (r *Reconciler) checkNodeReset(ctx context.Context, op *v1alpha1.TalosOperation, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error) {
	p := resetParams(op)
	machines, err := r.machines(ctx, op)
	if err != nil {
		return "", err
	}
	controlPlanes := 0
	for _, m := range machines {
		if m.Status.AppliedConfig != nil && render.MachineRole(m) == v1alpha1.MachineRoleControlPlane {
			controlPlanes++
		}
	}
	for _, m := range targets {
		controlPlane := render.MachineRole(m) == v1alpha1.MachineRoleControlPlane
		if wipesSystemDisk(p) {
			switch {
			case m.Spec.ExpectedFingerprint != "":
				return fmt.Sprintf("TalosMachine %s pins the certificate its console showed (spec.expectedFingerprint); after a wipe of its system disk its node presents a new one that only its console shows: delete the machine and create it again with that fingerprint, or wipe user-disks only", m.Name), nil
			case m.Status.Hardware == nil || m.Status.Hardware.UUID == "":
				return fmt.Sprintf("TalosMachine %s has no system UUID on record: after a wipe of its system disk Ichor could not tell its node from another at %s", m.Name, m.Spec.Address), nil
			case controlPlane && controlPlanes == 1:
				return fmt.Sprintf("TalosMachine %s is the only control plane of TalosCluster %s: wiping its system disk would end etcd and the cluster; add a control plane first, or restore etcd from a backup (etcd-restore)", m.Name, cluster.Name), nil
			case controlPlane && !gracefulReset(p):
				return fmt.Sprintf("graceful: false would leave TalosMachine %s's etcd member behind once its system disk is wiped; a control plane is reset gracefully", m.Name), nil
			}
		}
		for _, disk := range p.UserDisks {
			var have []string
			if m.Status.Hardware != nil {
				for _, d := range m.Status.Hardware.Disks {
					have = append(have, d.Path)
				}
			}
			switch {
			case disk == render.InstallDisk(m):
				return fmt.Sprintf("spec.nodeReset.userDisks: %s is the install disk of TalosMachine %s; wipe system-disk wipes it", disk, m.Name), nil
			case !slices.Contains(have, disk):
				return fmt.Sprintf("spec.nodeReset.userDisks: TalosMachine %s has no disk %s (it reports %s)", m.Name, disk, strings.Join(have, ", ")), nil
			}
		}
	}
	return "", nil
}

// startNodeReset resets a node once it may go away.
func startNodeReset(ctx context.Context, s *step) (ctrl.Result, error) {
	p := resetParams(s.x.op)
	req := resetRequest(p)
	var prepare func(context.Context) error
	what := fmt.Sprintf("resetting (wipe %s", p.Wipe)
	if len(p.UserDisks) > 0 {
		what += " " + strings.Join(p.UserDisks, ", ")
	}
	switch {
	case wipesSystemDisk(p) && req.Graceful:
		what += "): Talos drains the node and leaves etcd, wipes it, and it comes back in maintenance mode"
	case wipesSystemDisk(p):
		what += ", not graceful): the node comes back in maintenance mode"
	case gracefulReset(p):
		prepare = s.drain
		what += "): the node keeps its config and reboots"
	default:
		what += ", not graceful): the node keeps its config and reboots"
	}
	return s.takeAway(ctx, v1alpha1.DisruptionReset, what, prepare, func(ctx context.Context) error { return s.reset(ctx, req) })
}

// reset calls the node's reset and notes in the step's record that it
// accepted it (a node that never did is not taken back in maintenance
// mode: repin); its error is the node's only. The note is written with
// the step's status (callAway, or the reconcile's write), and kept in
// memory until then: a write that fails is made again (recallAcceptance).
func (s *step) reset(ctx context.Context, req talos.ResetRequest) error {
	if err := s.node.Reset(ctx, req); err != nil {
		return err
	}
	if rec := s.record(); rec.AcceptedAt == nil {
		at := metav1.NewTime(s.r.Now())
		rec.AcceptedAt = &at
		s.r.rememberAcceptance(s.x.op, rec)
	}
	return nil
}

// rememberAcceptance keeps the acceptance rec notes, by the step's start.
func (r *Reconciler) rememberAcceptance(op *v1alpha1.TalosOperation, rec *v1alpha1.OperationStep) {
	now := r.Now()
	r.acceptedMu.Lock()
	defer r.acceptedMu.Unlock()
	if r.accepted == nil {
		r.accepted = map[string]time.Time{}
	}
	for k, t := range r.accepted {
		if now.Sub(t) > time.Hour+r.Options.StepTimeout {
			delete(r.accepted, k)
		}
	}
	r.accepted[stepKey(op, rec)] = rec.AcceptedAt.Time
}

// recallAcceptance notes again in the step's record the acceptance this
// process saw and whose write failed (a conflict, an API server that did
// not answer): the node is resetting, and only the note lets repin take
// it back. After a crash there, the acceptance is lost with the process:
// the step then takes the node back only if it answers over mutual TLS
// again, and fails otherwise (repin).
func (s *step) recallAcceptance() {
	rec := s.record()
	if rec.AcceptedAt != nil || rec.StartedAt == nil {
		return
	}
	s.r.acceptedMu.Lock()
	defer s.r.acceptedMu.Unlock()
	if at, ok := s.r.accepted[stepKey(s.x.op, rec)]; ok {
		t := metav1.NewTime(at)
		rec.AcceptedAt = &t
	}
}

// followNodeReset waits for a reset node to run its config again.
func followNodeReset(ctx context.Context, s *step) (ctrl.Result, error) {
	p := resetParams(s.x.op)
	s.recallAcceptance()
	again := func(ctx context.Context) error { return s.reset(ctx, resetRequest(p)) }
	if !wipesSystemDisk(p) {
		back, res, err := s.backFromReboot(ctx, again)
		if !back || err != nil {
			return res, err
		}
		if back, res, err := s.nodeBack(ctx); !back || err != nil {
			return res, err
		}
		return s.done(ctx, "wiped %s; the node runs its config again and its Node is Ready", strings.Join(p.UserDisks, ", "))
	}
	m, started := s.m, *s.record().StartedAt
	now := metav1.NewTime(s.r.Now())
	switch {
	case !intake.Repinned(m, started):
		return s.repin(ctx, again)
	case configstatus.ConfigFromBeforeThePin(m):
		// A reconcile that read the machine before its config was forgotten
		// wrote it back: forget it again.
		if err := configstatus.ForgetConfig(ctx, s.r.Client, m, s.x.op.Name, now); err != nil {
			return ctrl.Result{}, err
		}
		return s.wait("the node is back in maintenance mode, its new certificate pinned; its config is installed again")
	case m.Status.AppliedConfig == nil || m.Status.Phase != v1alpha1.MachinePhaseReady:
		msg := string(m.Status.Phase)
		if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionReady); c != nil {
			msg = c.Message
		}
		if s.timedOut() {
			return s.failed(ctx, "the node was reset, but does not run its config again after %s: %s", s.r.Options.StepTimeout, msg)
		}
		return s.wait("installing the config again: %s", msg)
	}
	// Its kubelet bootstraps anew (its certificate went with the wipe).
	if back, res, err := s.nodeBack(ctx); !back || err != nil {
		return res, err
	}
	return s.done(ctx, "wiped (%s); the node runs its config again and its Node is Ready", p.Wipe)
}

// repin waits for the node of a system-disk reset to be back in
// maintenance mode, and then pins its new certificate and forgets the
// machine's config. A node that still runs the boot the reset was sent to
// may not have got it (the controller stopped between recording the step
// and calling, or the call did not reach the node), and one that never
// confirmed it did not take it, so either is asked again: Talos drops a
// reset while one runs.
// Nothing is pinned unless the node, over mutual TLS, accepted the reset:
// after a call whose answer was lost, whatever answers at the address in
// maintenance mode may not be the node.
func (s *step) repin(ctx context.Context, again func(context.Context) error) (ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	rec := s.record()
	if id, err := s.node.BootID(cctx); err == nil {
		// Asked again: a node that runs the boot the reset was sent to, or
		// one that never confirmed it (it may have rebooted for another
		// reason meanwhile).
		if st, err := s.node.Status(cctx); err == nil && (id == rec.BootID || rec.AcceptedAt == nil) && st.Stage == "running" {
			if err := again(cctx); err != nil && (!talos.NotAnswering(err) || s.timedOut()) {
				return s.failed(ctx, "%v", err)
			}
		}
		if s.timedOut() {
			return s.failed(ctx, "the node still runs its config %s after it was asked to reset", s.r.Options.StepTimeout)
		}
		return s.wait("waiting for the node to reset: it still answers with its config")
	}
	if rec.AcceptedAt == nil {
		if s.timedOut() {
			return s.failed(ctx, "the node stopped answering over mutual TLS without confirming its reset; nothing is pinned at %s: look at the node's console, and delete the machine to take it in afresh", s.m.Spec.Address)
		}
		return s.wait("the node stopped answering before it confirmed the reset; waiting for it to answer over mutual TLS")
	}
	mctx, cancel := s.call(ctx)
	defer cancel()
	contact := intake.Contact(mctx, s.r.Dialer, s.m.Spec.Address, "", "")
	if contact.Err != nil {
		if s.timedOut() {
			return s.failed(ctx, "the node did not come back in maintenance mode within %s: %v", s.r.Options.StepTimeout, contact.Err)
		}
		return s.wait("waiting for the node to come back in maintenance mode: %v", contact.Err)
	}
	now := metav1.NewTime(s.r.Now())
	if err := intake.Repin(ctx, s.r.Client, s.m, contact, s.x.op.Name, now); err != nil {
		var notThis *intake.NotThisMachineError
		if errors.As(err, &notThis) {
			return s.failed(ctx, "%v", err)
		}
		return ctrl.Result{}, err
	}
	events.Record(s.r.Recorder, s.m, s.x.op, v1alpha1.EventCertificateRepinned, "Reset",
		"Pinned SPKI fingerprint %s, presented at %s in maintenance mode after TalosOperation %s wiped the node; its config is installed again",
		contact.Fingerprint, s.m.Spec.Address, s.x.op.Name)
	if err := configstatus.ForgetConfig(ctx, s.r.Client, s.m, s.x.op.Name, now); err != nil {
		return ctrl.Result{}, err
	}
	return s.wait("the node is back in maintenance mode; pinned its new certificate %s; its config is installed again", contact.Fingerprint)
}
