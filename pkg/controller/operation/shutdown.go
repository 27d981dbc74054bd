package operation

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// A node-shutdown powers the named machines off, one control plane or
// spec.maxUnavailable workers at a time, each holding the disruption
// budget, a control plane only while etcd keeps its quorum without it.
// Talos cordons and drains each node first unless spec.nodeShutdown.force,
// and uncordons it when it boots again. Nothing but a person can power a
// node on again: until then its machine is Unreachable, and the cluster not
// healthy.
//
// A shutdown powers the whole cluster off in a safe order: a TalosBackup of
// the cluster first (its etcd snapshot and every machine's config; nothing
// goes down unless it succeeded), then the workers, then the control
// planes. Nodes are not drained (with the whole cluster going down, their
// pods have nowhere to go; Talos still stops them), and etcd's quorum is
// not kept: the cluster is meant to go down. A node that does not answer is
// taken as off already. The way back is to power every machine on, control
// planes first: each boots from its installed config, etcd starts from its
// data once a quorum of members runs, and the machines become Ready.

// shutdownSteps are a shutdown's steps over the targets: the backup on the
// first control plane, the workers, then the control planes.
func shutdownSteps(_ *v1alpha1.TalosOperation, targets []*v1alpha1.TalosMachine) []v1alpha1.OperationStep {
	cps, workers := byRole(targets)
	if len(cps) == 0 {
		return nil
	}
	steps := []v1alpha1.OperationStep{{Machine: cps[0], Action: v1alpha1.ActionBackup, Phase: v1alpha1.OperationPending}}
	for _, name := range append(workers, cps...) {
		steps = append(steps, v1alpha1.OperationStep{Machine: name, Phase: v1alpha1.OperationPending})
	}
	return steps
}

// checkShutdown refuses a shutdown of a cluster that has no control plane
// or no backup settings: its first step is a backup.
func (r *Reconciler) checkShutdown(_ context.Context, _ *v1alpha1.TalosOperation, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error) {
	if len(shutdownSteps(nil, targets)) == 0 {
		return fmt.Sprintf("TalosCluster %s has no configured control plane", cluster.Name), nil
	}
	if cluster.Spec.Backup == nil {
		return fmt.Sprintf("TalosCluster %s has no spec.backup: a shutdown backs the cluster up before any node goes down; an admin sets the backup target and recipients first", cluster.Name), nil
	}
	return "", nil
}

// checkNodeShutdown refuses a node-shutdown that would leave etcd without a
// quorum of running members once its control planes are off (with those
// already Unreachable, off or not): the cluster would stop, which is a
// shutdown's job.
func (r *Reconciler) checkNodeShutdown(ctx context.Context, op *v1alpha1.TalosOperation, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error) {
	targeted := map[string]bool{}
	for _, m := range targets {
		targeted[m.Name] = true
	}
	machines, err := r.machines(ctx, op)
	if err != nil {
		return "", err
	}
	cps, off := 0, 0
	var away []string
	for _, m := range machines {
		if m.Status.AppliedConfig == nil || render.MachineRole(m) != v1alpha1.MachineRoleControlPlane {
			continue
		}
		cps++
		switch {
		case targeted[m.Name]:
			off++
		case m.Status.Phase == v1alpha1.MachinePhaseUnreachable:
			away = append(away, m.Name)
		}
	}
	if off > 0 && cps-off-len(away) < cps/2+1 {
		msg := fmt.Sprintf("shutting down %d of the %d control planes of TalosCluster %s would leave etcd without a quorum (%d needed)",
			off, cps, cluster.Name, cps/2+1)
		if len(away) > 0 {
			msg += fmt.Sprintf(", with %s Unreachable already", strings.Join(away, ", "))
		}
		return msg + fmt.Sprintf("; shut the whole cluster down with a TalosOperation of type %s instead", v1alpha1.OperationShutdown), nil
	}
	return "", nil
}

// forcedShutdown reports whether op's shutdowns skip Talos's drain: a
// shutdown's always (its pods have nowhere to go), a node-shutdown's when
// it says force.
func forcedShutdown(op *v1alpha1.TalosOperation) bool {
	return op.Spec.Type == v1alpha1.OperationShutdown || (op.Spec.NodeShutdown != nil && op.Spec.NodeShutdown.Force)
}

// startNodeShutdown powers a node off once it may go away.
func startNodeShutdown(ctx context.Context, s *step) (ctrl.Result, error) {
	force := forcedShutdown(s.x.op)
	what := "shutting down: Talos cordons and drains the node, then powers it off"
	if force {
		what = "shutting down without draining (force): Talos stops the pods and powers the node off"
	}
	return s.takeAway(ctx, v1alpha1.DisruptionShutdown, what, nil, func(ctx context.Context) error { return s.node.Shutdown(ctx, force) })
}

// startShutdown is a shutdown's step: the backup, or a node to power off.
func startShutdown(ctx context.Context, s *step) (ctrl.Result, error) {
	if s.record().Action == v1alpha1.ActionBackup {
		return s.backUp(ctx)
	}
	reason, msg, err := s.acquire(ctx, v1alpha1.DisruptionShutdown, s.batch())
	if err != nil {
		return ctrl.Result{}, err
	}
	if msg != "" {
		return s.waitFor(reason, "%s", msg)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	if _, err := s.node.BootID(cctx); talos.NotAnswering(err) {
		return s.done(ctx, "the node's Talos API does not answer: taken as off already (%v)", err)
	}
	return s.callAway(ctx, "shutting down: Talos stops the pods and powers the node off", nil,
		func(ctx context.Context) error { return s.node.Shutdown(ctx, forcedShutdown(s.x.op)) })
}

// followShutdown waits for the node to be off: its Talos API no longer
// answers (or answers from a new boot: someone powered it on already). A
// node still running the recorded boot in stage running did not get the
// call (the controller stopped between recording the step and calling),
// so it is asked again; one in stage shutting down is left alone: Talos
// runs a shutdown with takeover, so a second one would start its drain
// again.
func followShutdown(ctx context.Context, s *step) (ctrl.Result, error) {
	if s.record().Action == v1alpha1.ActionBackup {
		return s.backedUp(ctx)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	rec := s.record()
	id, err := s.node.BootID(cctx)
	switch {
	case talos.NotAnswering(err):
		events.Record(s.r.Recorder, s.m, s.x.op, v1alpha1.EventPoweredOff, "Shutdown",
			"TalosOperation %s powered the node at %s off; it stays off until it is powered on (its BMC, cloud console or power button)",
			s.x.op.Name, s.m.Spec.Address)
		return s.done(ctx, "powered off: the node's Talos API no longer answers; power it on to bring it back")
	case err == nil && id != rec.BootID:
		return s.done(ctx, "shut down, and already powered on again (a new boot)")
	case s.timedOut():
		return s.failed(ctx, "the node did not power off within %s", s.r.Options.StepTimeout)
	case err != nil:
		return s.wait("waiting for the node to power off: %v", err)
	}
	st, err := s.node.Status(cctx)
	if err != nil {
		return s.wait("waiting for the node to power off: %v", err)
	}
	if st.Stage == "running" {
		if err := s.node.Shutdown(cctx, forcedShutdown(s.x.op)); err != nil && !talos.NotAnswering(err) {
			return s.failed(ctx, "%v", err)
		}
	}
	return s.wait("waiting for the node to power off (stage %s; Talos drains it first unless forced)", st.Stage)
}

// shutdownBackupName is the name of a shutdown's TalosBackup: the
// operation's.
func shutdownBackupName(op *v1alpha1.TalosOperation) string { return op.Name }

// backUp creates the shutdown's TalosBackup, marked as the operation's.
func (s *step) backUp(ctx context.Context) (ctrl.Result, error) {
	op := s.x.op
	b := &v1alpha1.TalosBackup{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: op.Namespace, Name: shutdownBackupName(op),
			Annotations: map[string]string{v1alpha1.AnnotationOperation: string(op.UID)},
		},
		Spec: v1alpha1.TalosBackupSpec{ClusterName: op.Spec.ClusterName},
	}
	switch err := s.r.Client.Create(ctx, b); {
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		return s.failed(ctx, "create TalosBackup %s: %v", b.Name, err)
	case err != nil && !apierrors.IsAlreadyExists(err):
		return ctrl.Result{}, fmt.Errorf("create TalosBackup %s: %w", b.Name, err) // tried again
	}
	if err := s.begin(ctx, "", "backing the cluster up to TalosBackup %s before any node goes down", b.Name); err != nil {
		return ctrl.Result{}, err
	}
	return s.backedUp(ctx)
}

// backedUp follows the shutdown's TalosBackup to its end.
func (s *step) backedUp(ctx context.Context) (ctrl.Result, error) {
	op := s.x.op
	var b v1alpha1.TalosBackup
	err := s.r.APIReader.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: shutdownBackupName(op)}, &b)
	switch {
	case apierrors.IsNotFound(err):
		return s.failed(ctx, "TalosBackup %s is gone before it ended; nothing was shut down", shutdownBackupName(op))
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("read TalosBackup %s: %w", shutdownBackupName(op), err)
	case b.Annotations[v1alpha1.AnnotationOperation] != string(op.UID) || b.Spec.ClusterName != op.Spec.ClusterName:
		return s.failed(ctx, "TalosBackup %s exists and is not this operation's; nothing was shut down: delete it, or shut down under another name", b.Name)
	}
	switch b.Status.Phase {
	case v1alpha1.BackupSucceeded:
		return s.done(ctx, "backed up to TalosBackup %s (%s)", b.Name, b.Status.Location)
	case v1alpha1.BackupFailed:
		msg := "no reason recorded"
		for _, c := range b.Status.Conditions {
			if c.Type == v1alpha1.BackupConditionSucceeded {
				msg = c.Message
			}
		}
		return s.failed(ctx, "TalosBackup %s failed: %s; nothing was shut down", b.Name, msg)
	}
	return s.wait("backing the cluster up to TalosBackup %s (%s)", b.Name, phaseOrNew(b.Status.Phase))
}

func phaseOrNew(p v1alpha1.BackupPhase) string {
	if p == "" {
		return "not started yet"
	}
	return string(p)
}
