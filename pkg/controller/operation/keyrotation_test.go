package operation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// The disk-encryption key rotation against fake nodes that sync their key
// slots with the config they boot, and a stand-in for machineconfig that
// applies the slots in force to one node at a time, with a reboot.

func keyRotation(name string, dry bool) *v1alpha1.TalosOperation {
	return started(name, v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationKeyRotation,
		KeyRotation: &v1alpha1.KeyRotationParameters{Keys: []v1alpha1.RotatableKey{v1alpha1.KeyDiskEncryption}, DryRun: dry}})
}

// slotsConfig is a config encrypting STATE and EPHEMERAL with TPM keys in
// slots.
func slotsConfig(slots []int) []byte {
	var cfg strings.Builder
	cfg.WriteString("version: v1alpha1\nmachine:\n  type: worker\n  install:\n    image: siderolabs/installer:v1.13.0\n")
	for _, volume := range render.EncryptedVolumes {
		fmt.Fprintf(&cfg, "---\napiVersion: v1alpha1\nkind: VolumeConfig\nname: %s\nencryption:\n  provider: luks2\n  keys:\n", volume)
		for _, slot := range slots {
			fmt.Fprintf(&cfg, "    - slot: %d\n      tpm: {}\n", slot)
		}
	}
	return []byte(cfg.String())
}

// encryptDisks makes the fixture's cluster encrypt its disks with key,
// every node's volumes holding slot 0, and plays machineconfig after each
// reconcile: a node whose config does not name the slots in force gets
// them with a reboot, one node at a time and every third reconcile (a
// rollout slower than the operation's checks), but the nodes in lagging.
func (f *fixture) encryptDisks(key v1alpha1.DiskEncryptionKey, lagging ...string) {
	c := f.cluster()
	c.Spec.Security.DiskEncryption = &v1alpha1.DiskEncryption{Key: key}
	if err := f.client.Update(context.Background(), c); err != nil {
		f.t.Fatal(err)
	}
	for _, name := range f.names {
		n := f.node(name)
		n.Config, n.KeySlots, n.OpenedWith = slotsConfig([]int{0}), []int{0}, ptr.To(0)
	}
	turn := 0
	f.react = func() {
		if turn++; turn%3 != 0 {
			return
		}
		want := slotsConfig(render.DiskKeySlots(f.cluster()))
		for _, name := range f.names {
			if f.node(name).Stage != "running" {
				return // one away at a time
			}
		}
		for _, name := range f.names {
			n := f.node(name)
			if slices.Contains(lagging, name) || string(n.Config) == string(want) {
				continue
			}
			node, err := f.dialer.Configured(context.Background(), name+":50000", talos.Credentials{})
			if err != nil {
				f.t.Fatal(err)
			}
			if _, err := node.ApplyConfiguration(context.Background(), want, talos.ApplyReboot); err != nil {
				f.t.Fatal(err)
			}
			return
		}
	}
}

// TestKeyRotationSurvivesACrashAtEveryWrite rotates the disk-encryption
// key with the controller stopping before each of its status writes in
// turn: every node ends holding the new slot alone, opened with it, and
// the cluster records the new slot with no rotation left.
func TestKeyRotationSurvivesACrashAtEveryWrite(t *testing.T) {
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			f := newFixture(t, keyRotation("rotate", false))
			f.encryptDisks(v1alpha1.DiskEncryptionKeyTPM)
			f.failWrite = fail
			var seen []v1alpha1.DiskKeyRotationPhase
			follow := f.react
			f.react = func() {
				// No node drops slot 0 while another has not enrolled slot 1.
				dropped, without := "", ""
				for _, name := range machineNames {
					switch s := f.node(name).KeySlots; {
					case !slices.Contains(s, 0):
						dropped = name
					case !slices.Contains(s, 1):
						without = name
					}
				}
				if dropped != "" && without != "" {
					t.Fatalf("%s dropped the old key slot while %s has no new one", dropped, without)
				}
				follow()
				if r := f.cluster().Status.DiskKeyRotation; r != nil && (len(seen) == 0 || seen[len(seen)-1] != r.Phase) {
					seen = append(seen, r.Phase)
				}
			}
			op := f.run("rotate")
			if fail == 0 {
				total = f.writes
			}
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			if got := fmt.Sprint(seen); got != "[AddNew DropOld]" {
				t.Errorf("phases %s", got)
			}
			for _, name := range machineNames {
				if n := f.node(name); !slices.Equal(n.KeySlots, []int{1}) || n.OpenedWith == nil || *n.OpenedWith != 1 {
					t.Errorf("%s holds key slots %v, opened with %v", name, n.KeySlots, n.OpenedWith)
				}
			}
			if c := f.cluster(); c.Status.DiskKeyRotation != nil || c.Status.DiskKeySlot != 1 {
				t.Errorf("cluster: rotation %+v, slot %d", c.Status.DiskKeyRotation, c.Status.DiskKeySlot)
			}
			if f.mostAway > 1 {
				t.Errorf("%d nodes were away at once", f.mostAway)
			}
		})
	}
	// One write starts the operation, one records each step (with the
	// previous one's end), one ends it; waits write their progress too.
	if total < 2*len(machineNames)+2 {
		t.Fatalf("%d status writes, want at least %d: the crash points were not all exercised", total, 2*len(machineNames)+2)
	}
}

// TestKeyRotationStopsAtANodeThatDoesNotEnroll: a node whose boot does
// not enroll the new key stops the rotation before any node drops the
// old one; once it does, a new key-rotation takes over with the same slot.
func TestKeyRotationStopsAtANodeThatDoesNotEnroll(t *testing.T) {
	f := newFixture(t, keyRotation("rotate", false))
	f.r.Options.StepTimeout = 2 * time.Minute // the other nodes reboot meanwhile, one at a time
	f.encryptDisks(v1alpha1.DiskEncryptionKeyTPM)
	f.node("cp-3").FailKeySync = "error adding key slot 1: TPM is busy"
	op := f.run("rotate")
	if op.Status.Phase != v1alpha1.OperationFailed {
		t.Fatalf("ended %s, want Failed", op.Status.Phase)
	}
	var failed *v1alpha1.OperationStep
	for i, s := range op.Status.Steps {
		if s.Phase == v1alpha1.OperationFailed {
			failed = &op.Status.Steps[i]
		}
		if s.Action == v1alpha1.ActionDropOldDiskKey && s.Phase != v1alpha1.OperationPending {
			t.Errorf("step %s ran: %s", s.Name(), s.Message)
		}
	}
	if failed == nil || failed.Machine != "cp-3" || !strings.Contains(failed.Message, "TPM is busy") {
		t.Fatalf("failed step: %+v", failed)
	}
	if r := f.cluster().Status.DiskKeyRotation; r == nil || r.Phase != v1alpha1.DiskKeyRotationAddNew || r.Slot != 1 {
		t.Fatalf("the cluster left phase AddNew: %+v", r)
	}
	for _, name := range machineNames {
		if !slices.Contains(f.node(name).KeySlots, 0) {
			t.Errorf("%s dropped the old key slot", name)
		}
	}

	// cp-3 enrolls at its next boot; a second rotation takes over.
	f.node("cp-3").FailKeySync, f.node("cp-3").Stage = "", "rebooting"
	if err := f.client.Create(context.Background(), keyRotation("rotate-again", false)); err != nil {
		t.Fatal(err)
	}
	op = f.run("rotate-again")
	if op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("the second rotation ended %s: %+v", op.Status.Phase, op.Status)
	}
	if c := f.cluster(); c.Status.DiskKeySlot != 1 || c.Status.DiskKeyRotation != nil {
		t.Errorf("cluster: rotation %+v, slot %d", c.Status.DiskKeyRotation, c.Status.DiskKeySlot)
	}
}

// TestKeyRotationRefusals: a cluster without disk encryption, or with a
// nodeID key, has nothing to rotate; the operation fails before any step
// saying so, touching no node.
func TestKeyRotationRefusals(t *testing.T) {
	for _, c := range []struct {
		key  v1alpha1.DiskEncryptionKey
		want string
	}{
		{"", "does not encrypt its machines' disks"},
		{v1alpha1.DiskEncryptionKeyNodeID, "only a tpm key is rotated"},
	} {
		t.Run(string(c.key), func(t *testing.T) {
			f := newFixture(t, keyRotation("rotate", false))
			if c.key != "" {
				f.encryptDisks(c.key)
			}
			op := f.run("rotate")
			if op.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(fmt.Sprint(op.Status.Conditions), c.want) {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status.Conditions)
			}
			for _, name := range machineNames {
				if calls := f.node(name).Calls; len(calls) > 0 {
					t.Errorf("%s was called: %v", name, calls)
				}
			}
			if r := f.cluster().Status.DiskKeyRotation; r != nil {
				t.Errorf("the cluster entered a rotation: %+v", r)
			}
		})
	}
}

// TestKeyRotationDryRun says what each phase would change and changes
// nothing.
func TestKeyRotationDryRun(t *testing.T) {
	f := newFixture(t, keyRotation("rotate", true))
	f.encryptDisks(v1alpha1.DiskEncryptionKeyTPM)
	op := f.run("rotate")
	if op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
	}
	for _, s := range op.Status.Steps {
		if !strings.HasPrefix(s.Message, "dry run: ") || !strings.Contains(s.Message, "slot 1") {
			t.Errorf("step %s: %q", s.Name(), s.Message)
		}
	}
	if c := f.cluster(); c.Status.DiskKeyRotation != nil || c.Status.DiskKeySlot != 0 {
		t.Errorf("a dry run changed the cluster: %+v", c.Status)
	}
	for _, name := range machineNames {
		if n := f.node(name); !slices.Equal(n.KeySlots, []int{0}) || len(n.Calls) > 0 {
			t.Errorf("a dry run touched %s: slots %v, calls %v", name, n.KeySlots, n.Calls)
		}
	}
}

// TestKeyRotationStepWaitsForItsRolloutTurn: machineconfig gives the
// machines the phase's config in its own order (here the last machine
// first), which takes longer than the step timeout for all of them; the
// step of a machine that waits for its turn does not time out, its time
// running from its machine's config.
func TestKeyRotationStepWaitsForItsRolloutTurn(t *testing.T) {
	f := newFixture(t, keyRotation("rotate", false))
	f.encryptDisks(v1alpha1.DiskEncryptionKeyTPM)
	f.r.Options.StepTimeout = 4 * f.r.Options.PollInterval
	ctx := context.Background()
	turn := 0
	f.react = func() {
		want := slotsConfig(render.DiskKeySlots(f.cluster()))
		away := false
		for _, name := range f.names {
			away = away || f.node(name).Stage != "running"
		}
		applied := away || turn%3 != 0
		turn++
		for _, name := range slices.Backward(f.names) {
			var m v1alpha1.TalosMachine
			if err := f.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil {
				t.Fatal(err)
			}
			if string(f.node(name).Config) == string(want) {
				continue
			}
			cond := metav1.Condition{Type: v1alpha1.MachineConditionConfigApplied, Status: metav1.ConditionFalse,
				Reason: v1alpha1.MachineReasonWaitingForRollout, Message: "another machine of the cluster takes its config first"}
			if !applied {
				node, err := f.dialer.Configured(ctx, name+":50000", talos.Credentials{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := node.ApplyConfiguration(ctx, want, talos.ApplyReboot); err != nil {
					t.Fatal(err)
				}
				m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: "h", AppliedAt: metav1.NewTime(f.clock)}
				cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, "Applied", "applied"
				applied = true
			}
			meta.SetStatusCondition(&m.Status.Conditions, cond)
			if err := f.client.Status().Update(ctx, &m); err != nil {
				t.Fatal(err)
			}
		}
	}
	op := f.run("rotate")
	if op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
	}
	for _, name := range machineNames {
		if n := f.node(name); !slices.Equal(n.KeySlots, []int{1}) {
			t.Errorf("%s holds key slots %v", name, n.KeySlots)
		}
	}
}
