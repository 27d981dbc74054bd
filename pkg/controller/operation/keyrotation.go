package operation

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// A key-rotation of the disk-encryption key (of Kubernetes keys:
// kuberneteskeys.go) replaces the TPM-sealed key
// that unlocks every machine's STATE and EPHEMERAL, the way Talos can: it
// syncs a volume's LUKS2 key slots with its config when it opens the
// volume at boot, enrolling a slot the config adds and removing one it no
// longer names. So the rotation takes two phases, each a reboot of every
// machine: the configs name the old slot and a new one (AddNew: the node
// opens its volumes with the old key and enrolls a new one), then the new
// slot alone (DropOld: it opens them with the new key and removes the old
// slot). The phase is the cluster's (status.diskKeyRotation) and the
// configs follow it (render.DiskKeySlots): machineconfig rolls the change
// out as any change that takes a reboot, one machine at a time under the
// cluster's disruption budget. The operation moves the cluster into each
// phase and checks every machine, control planes first, from its node's
// own state: it runs the phase's config and its volumes opened, with a
// key of the phase, without a failed sync. A phase is never entered
// before every machine passed the one before: a node whose volumes held
// only the old key would not open them with the new one alone.
//
// The key itself never leaves the node: it is sealed to its TPM. The
// rotation ends by recording the new slot as the cluster's
// (status.diskKeySlot), in the same write that ends the rotation.

// DiskKeyRotationFieldManager owns a cluster's status.diskKeyRotation.
const DiskKeyRotationFieldManager = v1alpha1.FieldManagerKeyRotation

// diskKeyPhaseActions are the steps' actions, by the phase each checks.
var diskKeyPhaseActions = map[v1alpha1.StepAction]v1alpha1.DiskKeyRotationPhase{
	v1alpha1.ActionAddDiskKey:     v1alpha1.DiskKeyRotationAddNew,
	v1alpha1.ActionDropOldDiskKey: v1alpha1.DiskKeyRotationDropOld,
}

// keyRotationSteps are every machine's step in each phase, phase by phase
// (kubernetesKeySteps for Kubernetes keys).
func keyRotationSteps(op *v1alpha1.TalosOperation, targets []*v1alpha1.TalosMachine) []v1alpha1.OperationStep {
	if kubernetesKeysOf(op) {
		return kubernetesKeySteps(targets)
	}
	var steps []v1alpha1.OperationStep
	for _, action := range []v1alpha1.StepAction{v1alpha1.ActionAddDiskKey, v1alpha1.ActionDropOldDiskKey} {
		for _, m := range targets {
			steps = append(steps, v1alpha1.OperationStep{Machine: m.Name, Action: action, Phase: v1alpha1.OperationPending})
		}
	}
	return steps
}

// keyRotationDryRun reports whether op only says what it would do.
func keyRotationDryRun(op *v1alpha1.TalosOperation) bool {
	return op.Spec.KeyRotation != nil && op.Spec.KeyRotation.DryRun
}

// checkKeyRotation refuses a rotation of a key the cluster does not have
// in a form that rotates, and one while another runs; one that a failed
// or deleted operation left is taken over.
func (r *Reconciler) checkKeyRotation(ctx context.Context, op *v1alpha1.TalosOperation, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error) {
	if kubernetesKeysOf(op) {
		return r.checkKubernetesKeys(ctx, op, cluster, targets)
	}
	enc := cluster.Spec.Security.DiskEncryption
	switch {
	case len(targets) == 0:
		return fmt.Sprintf("TalosCluster %s has no configured machine", cluster.Name), nil
	case enc == nil:
		return fmt.Sprintf("TalosCluster %s does not encrypt its machines' disks (spec.security.diskEncryption): it has no disk-encryption key to rotate", cluster.Name), nil
	case enc.Key != v1alpha1.DiskEncryptionKeyTPM:
		return fmt.Sprintf("TalosCluster %s's disks are encrypted with the %s key, which each machine derives from its own identity: "+
			"a new key slot would hold the same key, so there is nothing to rotate; only a tpm key is rotated", cluster.Name, enc.Key), nil
	}
	cur := cluster.Status.DiskKeyRotation
	if cur == nil || cur.Operation == op.Name {
		return "", nil
	}
	if busy, err := r.rotatingElsewhere(ctx, op, cur.Operation); err != nil || !busy {
		return "", err
	}
	return fmt.Sprintf("TalosOperation %s is rotating TalosCluster %s's disk-encryption key (phase %s)", cur.Operation, cluster.Name, cur.Phase), nil
}

// startKeyRotationStep moves the cluster into the step's phase, if it is
// not there or further yet, and follows the machine's node into it. A dry
// run says what the phase would change and touches nothing.
func startKeyRotationStep(ctx context.Context, s *step) (ctrl.Result, error) {
	if kubernetesKeysOf(s.x.op) {
		return startKubernetesKeysStep(ctx, s)
	}
	phase := diskKeyPhaseActions[s.record().Action]
	old := int(s.cluster.Status.DiskKeySlot)
	next := 1 - min(old, 1)
	if r := s.cluster.Status.DiskKeyRotation; r != nil {
		next = int(r.Slot)
	}
	if keyRotationDryRun(s.x.op) {
		return s.done(ctx, "dry run: %s", describeDiskKeyPhase(phase, old, next))
	}
	if err := s.r.enterDiskKeyPhase(ctx, s.x, phase, next); err != nil {
		return ctrl.Result{}, err
	}
	if err := s.begin(ctx, "", "waiting for the node to boot with the config of phase %s: %s", phase, describeDiskKeyPhase(phase, old, next)); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.r.Options.StepPollInterval}, nil
}

// describeDiskKeyPhase says what a phase changes on a machine.
func describeDiskKeyPhase(phase v1alpha1.DiskKeyRotationPhase, old, next int) string {
	if phase == v1alpha1.DiskKeyRotationAddNew {
		return fmt.Sprintf("the VolumeConfigs of STATE and EPHEMERAL name key slot %d beside slot %d; the node reboots, opens them with its key and seals a new one to its TPM in slot %d", next, old, next)
	}
	return fmt.Sprintf("the VolumeConfigs of STATE and EPHEMERAL name key slot %d alone; the node reboots, opens them with the new key and removes slot %d", next, old)
}

// enterDiskKeyPhase records phase as the cluster's, for x's operation,
// with the new key's slot, unless the cluster is there or further
// already: a rotation never moves back.
func (r *Reconciler) enterDiskKeyPhase(ctx context.Context, x *run, phase v1alpha1.DiskKeyRotationPhase, slot int) error {
	cluster, err := r.cluster(ctx, x.op)
	if err != nil {
		return err
	}
	cur := cluster.Status.DiskKeyRotation
	at := func(p v1alpha1.DiskKeyRotationPhase) int { return slices.Index(v1alpha1.DiskKeyRotationPhases, p) }
	if cur != nil && cur.Operation == x.op.Name && at(cur.Phase) >= at(phase) {
		return nil
	}
	if cur != nil && at(cur.Phase) > at(phase) {
		phase = cur.Phase // taken over where it is
	}
	since := metav1.NewTime(r.Now())
	obj := ichorac.TalosCluster(cluster.Name, cluster.Namespace).WithResourceVersion(cluster.ResourceVersion).
		WithStatus(ichorac.TalosClusterStatus().WithDiskKeyRotation(ichorac.DiskKeyRotationStatus().
			WithOperation(x.op.Name).WithPhase(phase).WithSlot(int32(slot)).WithSince(since)))
	if err := r.Client.Status().Apply(ctx, obj, client.FieldOwner(DiskKeyRotationFieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("move TalosCluster %s into phase %s of its disk-encryption key rotation: %w", cluster.Name, phase, err)
	}
	events.Record(r.Recorder, cluster, x.op, v1alpha1.EventDiskKeyRotationPhase, "RotateDiskKey",
		"TalosOperation %s moved the disk-encryption key rotation into phase %s (new key slot %d)", x.op.Name, phase, slot)
	x.cluster = nil
	return nil
}

// followKeyRotationStep waits for the machine's node to boot with the key
// slots in force (what the cluster's phase says) and to have opened STATE
// and EPHEMERAL with one of them, every slot synced.
func followKeyRotationStep(ctx context.Context, s *step) (ctrl.Result, error) {
	if kubernetesKeysOf(s.x.op) {
		return followKubernetesKeysStep(ctx, s)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	phase := diskKeyPhaseActions[s.record().Action]
	if r := s.cluster.Status.DiskKeyRotation; r != nil {
		phase = r.Phase // a rotation taken over further on
	}
	want := render.DiskKeySlots(s.cluster)
	msg, err := volumesDiffer(cctx, s.node, want, phase)
	// Machineconfig rolls the phase's config out one machine at a time, in
	// its own order: the step's time runs from its machine's turn.
	if err != nil {
		if s.rolloutTimedOut() {
			return s.failed(ctx, "the node's Talos API did not answer within %s: %v; the cluster stays in phase %s", s.r.Options.StepTimeout, err, phase)
		}
		return s.wait("waiting for the node's Talos API: %v", err)
	}
	if msg != "" {
		if s.rolloutTimedOut() {
			return s.failed(ctx, "the node did not boot into phase %s within %s: %s; the cluster stays in phase %s, and no machine drops a key slot before every one opened its volumes with the new key", phase, s.r.Options.StepTimeout, msg, phase)
		}
		if c := s.rolloutTurn(); c != "" {
			msg += "; " + c
		}
		return s.wait("waiting for the node to boot with the config of phase %s: %s", phase, msg)
	}
	return s.done(ctx, "the node booted with key slots %v and opened STATE and EPHEMERAL with one of them, every slot synced", want)
}

// volumesDiffer says how the node's system volumes differ from what phase
// wants, or "": it runs a config naming exactly slots for STATE and
// EPHEMERAL (its running config: a config applied with a reboot runs
// from the boot it reboots into), and its last boot opened both with a
// key of slots (the new one, in DropOld) and synced every slot.
func volumesDiffer(ctx context.Context, node talos.Node, slots []int, phase v1alpha1.DiskKeyRotationPhase) (string, error) {
	data, err := node.Config(ctx)
	if err != nil {
		return "", err
	}
	running, err := render.ConfiguredDiskKeySlots(data)
	if err != nil {
		return "", err
	}
	for _, volume := range render.EncryptedVolumes {
		if got := running[volume]; !slices.Equal(got, slots) {
			return fmt.Sprintf("its running config names key slots %v for %s, the phase %v", got, volume, slots), nil
		}
		v, err := node.Volume(ctx, volume)
		if err != nil {
			return "", err
		}
		switch {
		case v.Phase != "ready" || !v.Encrypted || v.OpenedWithSlot == nil:
			return fmt.Sprintf("%s is %s, not open: %s", volume, v.Phase, v.Error), nil
		case len(v.FailedSyncs) > 0:
			return fmt.Sprintf("%s opened, but its key slots did not sync: %s", volume, strings.Join(v.FailedSyncs, "; ")), nil
		case !slices.Contains(slots, *v.OpenedWithSlot):
			return fmt.Sprintf("%s opened with key slot %d, outside the phase's %v", volume, *v.OpenedWithSlot, slots), nil
		case phase == v1alpha1.DiskKeyRotationDropOld && *v.OpenedWithSlot != slots[0]:
			return fmt.Sprintf("%s opened with key slot %d, not the new key's %d", volume, *v.OpenedWithSlot, slots[0]), nil
		}
	}
	return "", nil
}

// finishKeyRotation records the new key's slot as the cluster's and ends
// its rotation, in one write. It may run again after a restart.
func (r *Reconciler) finishKeyRotation(ctx context.Context, x *run) error {
	if kubernetesKeysOf(x.op) {
		return r.finishKubernetesKeys(ctx, x)
	}
	if keyRotationDryRun(x.op) {
		return nil
	}
	cluster, err := r.cluster(ctx, x.op)
	if err != nil {
		return err
	}
	cur := cluster.Status.DiskKeyRotation
	if cur == nil || cur.Operation != x.op.Name {
		return nil
	}
	patch := client.MergeFromWithOptions(cluster.DeepCopy(), client.MergeFromWithOptimisticLock{})
	cluster.Status.DiskKeySlot = cur.Slot
	cluster.Status.DiskKeyRotation = nil
	if err := r.Client.Status().Patch(ctx, cluster, patch); err != nil {
		return fmt.Errorf("end TalosCluster %s's disk-encryption key rotation: %w", cluster.Name, err)
	}
	events.Record(r.Recorder, cluster, x.op, v1alpha1.EventDiskKeyRotated, "RotateDiskKey",
		"TalosOperation %s rotated the disk-encryption key: every machine opens STATE and EPHEMERAL with the new key in slot %d alone", x.op.Name, cur.Slot)
	return nil
}
