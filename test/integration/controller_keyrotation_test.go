package integration

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/talossim"
)

// TestControllerRotatesDiskKeys: a 3+2 cluster whose disks are sealed to
// each node's TPM has its disk-encryption key rotated, as Talos can: every
// node reboots twice, one at a time, first enrolling a new key slot beside
// the old one, then dropping the old one. An operator may not start it;
// keys Talos cannot rotate are refused at create, naming the one it can;
// a dry run touches nothing; talosctl reads the result from a node.
func TestControllerRotatesDiskKeys(t *testing.T) {
	d := newDemoClusterWith(t, demoSetup{diskEncryption: v1alpha1.DiskEncryptionKeyTPM, tune: func(o *ctrlcmd.Options) {
		o.OperationPollInterval = 250 * time.Millisecond
		o.OperationStepTimeout = operationStepTimeout
	}})
	t.Run("three control planes and two workers become Ready", d.becomesReady)
	t.Run("an admin rotates the disk-encryption key, two reboots of each node one at a time", d.diskKeyRotation)
}

func (d *demoCluster) diskKeyRotation(t *testing.T) {
	ctx := d.ctx
	wantSlots := func(want ...int) {
		t.Helper()
		for name, n := range d.nodes {
			for _, volume := range []string{"STATE", "EPHEMERAL"} {
				if got := n.KeySlots(volume); !slices.Equal(got, want) {
					t.Errorf("%s %s holds key slots %v, want %v", name, volume, got, want)
				}
			}
		}
	}
	wantSlots(0)

	// Keys Talos cannot rotate are refused at create, naming the one it can.
	out, err := cp.KubectlWithInput(ctx, []byte("apiVersion: ichor.dev/v1alpha1\nkind: TalosOperation\nmetadata: {name: rotate-secretbox, namespace: "+d.ns+"}\nspec: {clusterName: demo, type: key-rotation, keyRotation: {keys: [secretbox]}}\n"),
		append(admin, "create", "-f", "-")...)
	if msg := out + errString(err); err == nil || !strings.Contains(msg, "spec.keyRotation.keys[0]: Invalid value: \"secretbox\": Talos v1.13 cannot rotate the secretbox key") ||
		!strings.Contains(msg, `a key-rotation rotates "diskEncryption"`) {
		t.Errorf("a key-rotation of the secretbox key: %v\n%s", err, out)
	}

	// An operator may create one, not start it.
	d.createOperation(t, operator, "rotate-by-operator", "clusterName: demo\ntype: key-rotation")
	out, err = cp.KubectlWithInput(ctx, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosOperation"}`),
		append(operator, "create", "--raw", "/apis/ichor.dev/v1alpha1/namespaces/"+d.ns+"/talosoperations/rotate-by-operator/start", "-f", "-")...)
	if msg := out + errString(err); err == nil || !strings.Contains(msg, "forbidden") || !strings.Contains(msg, `subresource "key-rotation"`) {
		t.Errorf("an operator started a key-rotation: %v\n%s", err, out)
	}
	// The default is the disk-encryption key.
	if out := mustKubectl(ctx, t, append(operator, "-n", d.ns, "get", "talosoperation", "rotate-by-operator", "-o", "jsonpath={.spec.keyRotation.keys}")...); out != `["diskEncryption"]` {
		t.Errorf("defaulted keys %s", out)
	}

	bootIDs := map[string]string{}
	for name, n := range d.nodes {
		bootIDs[name] = n.BootID()
	}
	d.createOperation(t, admin, "rotate-dry", "clusterName: demo\ntype: key-rotation\nkeyRotation: {dryRun: true}")
	d.startOperation(t, admin, "rotate-dry")
	op := d.waitOperationEnds(t, "rotate-dry", v1alpha1.OperationSucceeded)
	for _, s := range op.Status.Steps {
		if !strings.HasPrefix(s.Message, "dry run: ") {
			t.Errorf("dry run step %s: %q", s.Name(), s.Message)
		}
	}
	for name, n := range d.nodes {
		if n.BootID() != bootIDs[name] {
			t.Errorf("a dry run rebooted %s", name)
		}
	}
	wantSlots(0)

	since := time.Now()
	d.createOperation(t, admin, "rotate-disk-key", "clusterName: demo\ntype: key-rotation")
	d.startOperation(t, admin, "rotate-disk-key")
	op = d.waitOperationEnds(t, "rotate-disk-key", v1alpha1.OperationSucceeded)
	if len(op.Status.Steps) != 2*len(d.nodes) {
		t.Errorf("%d steps, want %d: %s", len(op.Status.Steps), 2*len(d.nodes), describeOperation(op))
	}
	wantSlots(1)
	for name, n := range d.nodes {
		reboots := 0
		for _, c := range n.PhaseChanges() {
			if c.At.After(since) && c.Phase == talossim.PhaseRebooting {
				reboots++
			}
		}
		if reboots != 2 {
			t.Errorf("%s rebooted %d times, want 2", name, reboots)
		}
	}
	if most, when := mostAwayAtOnce(d.nodes, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
	}
	c := getCluster(t, d.ns, "demo")
	if c.Status.DiskKeySlot != 1 || c.Status.DiskKeyRotation != nil {
		t.Errorf("cluster: slot %d, rotation %+v", c.Status.DiskKeySlot, c.Status.DiskKeyRotation)
	}
	waitEvent(ctx, t, d.ns, "demo", corev1.EventTypeNormal, v1alpha1.EventDiskKeyRotated)

	// talosctl, as a reader, sees what the node opened its volumes with.
	out, err = d.talosctl(t)(d.downloadReaderTalosconfig(t), "get", "volumestatus", "EPHEMERAL", "-o", "yaml")
	if err != nil || !strings.Contains(out, "encryptionProvider: luks2") || !strings.Contains(out, "encryptionSlot: 1") {
		t.Errorf("talosctl get volumestatus EPHEMERAL: %v\n%s", err, out)
	}
}

// errString is err's message, "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
