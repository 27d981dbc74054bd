package operation

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/talos"
)

// startReboot reboots a node, gracefully unless spec.reboot.force, once it
// may go away.
func startReboot(ctx context.Context, s *step) (ctrl.Result, error) {
	force := s.x.op.Spec.Reboot != nil && s.x.op.Spec.Reboot.Force
	var prepare func(context.Context) error
	if !force {
		prepare = s.drain
	}
	return s.reboot(ctx, "rebooting", prepare, func(ctx context.Context) error { return s.node.Reboot(ctx, force) })
}

// followReboot waits for the node to be back from its reboot.
func followReboot(ctx context.Context, s *step) (ctrl.Result, error) {
	force := s.x.op.Spec.Reboot != nil && s.x.op.Spec.Reboot.Force
	back, res, err := s.backFromReboot(ctx, func(ctx context.Context) error { return s.node.Reboot(ctx, force) })
	if !back || err != nil {
		return res, err
	}
	if back, res, err := s.nodeBack(ctx); !back || err != nil {
		return res, err
	}
	return s.done(ctx, "rebooted: the node runs a new boot and its Node is Ready")
}

// reboot takes the node away with call, which makes it reboot (takeAway).
func (s *step) reboot(ctx context.Context, what string, prepare, call func(context.Context) error) (ctrl.Result, error) {
	return s.takeAway(ctx, v1alpha1.DisruptionReboot, what, prepare, call)
}

// takeAway takes the node away for action with call: it waits for the
// cluster to allow it, takes the budget, and calls (callAway).
func (s *step) takeAway(ctx context.Context, action v1alpha1.DisruptionAction, what string, prepare, call func(context.Context) error) (ctrl.Result, error) {
	if ok, res, err := s.mayTake(ctx, action); !ok {
		return res, err
	}
	return s.callAway(ctx, what, prepare, call)
}

// callAway, with the budget held, checks the node is this machine, runs
// prepare (if any: what must be done before the call, and can be done
// again if the controller stops during it), records the step as Running
// with the node's boot ID, and then calls. call's error is the node's
// answer, so call makes node calls only: what it notes in the step's
// record (a reset's acceptance) is written after it, and a write that
// fails is this controller's error, not the node's refusal: the reconcile
// is tried again with the step Running and its budget held, the node away.
func (s *step) callAway(ctx context.Context, what string, prepare, call func(context.Context) error) (ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	if err := intake.CheckIdentity(cctx, s.node, s.m); err != nil {
		return s.failed(ctx, "the node at %s is not this machine: %v", s.m.Spec.Address, err)
	}
	if prepare != nil {
		err := prepare(ctx)
		if w, ok := asWait(err); ok {
			return s.waitFor(w.reason, "%s", w.msg)
		}
		if err != nil {
			return s.failed(ctx, "%v", err)
		}
	}
	bootID, err := s.node.BootID(cctx)
	if err != nil {
		return s.failed(ctx, "read the boot ID before %s: %v", what, err)
	}
	if err := s.begin(ctx, bootID, "%s", what); err != nil {
		return ctrl.Result{}, err
	}
	if err := call(cctx); err != nil {
		if talos.NotAnswering(err) {
			// The call may not have reached the node, or its answer was
			// lost as the node went away: the node's own state tells which
			// when the step is followed, and a node that still runs the
			// recorded boot is asked again.
			return s.wait("the node did not answer the call (%v); looking at the node again", err)
		}
		return s.failed(ctx, "%v", err)
	}
	if err := s.x.persist(ctx); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.r.Options.StepPollInterval}, nil
}

// backFromReboot reports whether the node of a Running step is back: it
// answers with another boot ID than the one recorded, in stage running and
// ready. A node that still runs the recorded boot did not get the request
// (the controller stopped between recording the step and calling), so
// again asks it again: a node already rebooting drops the second request.
// A node not back within StepTimeout fails the step.
func (s *step) backFromReboot(ctx context.Context, again func(context.Context) error) (bool, ctrl.Result, error) {
	// The node's calls share one deadline; what the step writes afterwards
	// does not (a node that hangs spends the calls' deadline).
	cctx, cancel := s.call(ctx)
	defer cancel()
	rec := s.record()
	id, err := s.node.BootID(cctx)
	if err != nil {
		if s.timedOut() {
			res, err2 := s.failed(ctx, "the node did not come back within %s of its reboot: %v", s.r.Options.StepTimeout, err)
			return false, res, err2
		}
		res, err2 := s.wait("waiting for the node to come back from its reboot")
		return false, res, err2
	}
	st, err := s.node.Status(cctx)
	if err != nil {
		res, err2 := s.wait("waiting for the node's status: %v", err)
		return false, res, err2
	}
	if id == rec.BootID {
		if st.Stage == "running" {
			if err := again(cctx); err != nil && (!talos.NotAnswering(err) || s.timedOut()) {
				res, err2 := s.failed(ctx, "%v", err)
				return false, res, err2
			}
		}
		if s.timedOut() {
			res, err2 := s.failed(ctx, "the node did not reboot within %s", s.r.Options.StepTimeout)
			return false, res, err2
		}
		res, err2 := s.wait("waiting for the node to reboot (stage %s)", st.Stage)
		return false, res, err2
	}
	if !st.Running() {
		if s.timedOut() {
			res, err2 := s.failed(ctx, "the node rebooted but is not running and ready after %s: stage %s, waiting for %v", s.r.Options.StepTimeout, st.Stage, st.Unmet)
			return false, res, err2
		}
		res, err2 := s.wait("the node rebooted; in stage %s, waiting for %v", st.Stage, st.Unmet)
		return false, res, err2
	}
	return true, ctrl.Result{}, nil
}
