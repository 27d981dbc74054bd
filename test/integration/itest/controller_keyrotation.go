package itest

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/talossim"
)

func (d *DemoCluster) DiskKeyRotation(t *testing.T) {
	ctx := d.Ctx
	wantSlots := func(want ...int) {
		t.Helper()
		for name, n := range d.Nodes {
			for _, volume := range []string{"STATE", "EPHEMERAL"} {
				if got := n.KeySlots(volume); !slices.Equal(got, want) {
					t.Errorf("%s %s holds key slots %v, want %v", name, volume, got, want)
				}
			}
		}
	}
	wantSlots(0)

	// A key by another name is refused at create, naming the keys there are.
	out, err := CP.KubectlWithInput(ctx, []byte("apiVersion: ichor.dev/v1alpha1\nkind: TalosOperation\nmetadata: {name: rotate-secretbox, namespace: "+d.Ns+"}\nspec: {clusterName: demo, type: key-rotation, keyRotation: {keys: [secretbox]}}\n"),
		append(Admin, "create", "-f", "-")...)
	if msg := out + ErrString(err); err == nil || !strings.Contains(msg, "spec.keyRotation.keys[0]: Invalid value: \"secretbox\": the secretbox key that encrypts Kubernetes Secrets at rest is named secretsEncryption") ||
		!strings.Contains(msg, `a key-rotation rotates "diskEncryption", "serviceAccount", "secretsEncryption"`) {
		t.Errorf("a key-rotation of the secretbox key: %v\n%s", err, out)
	}
	// On the v1.13 contract, whose control planes take one key of each, a
	// rotation of the secrets-encryption key fails before it touches anything.
	d.CreateOperation(t, Admin, "rotate-kube-keys", "clusterName: demo\ntype: key-rotation\nkeyRotation: {keys: [secretsEncryption]}")
	d.StartOperation(t, Admin, "rotate-kube-keys")
	if op := d.WaitOperationEnds(t, "rotate-kube-keys", v1alpha1.OperationFailed); !strings.Contains(DescribeOperation(op), "renders the v1.13 contract, whose control planes take one service-account key and one secretbox key") {
		t.Errorf("a key-rotation of the secretbox key on the v1.13 contract: %s", DescribeOperation(op))
	}
	if c := GetCluster(t, d.Ns, "demo"); c.Status.KubernetesKeyRotation != nil {
		t.Errorf("a refused key-rotation moved the cluster: %+v", c.Status.KubernetesKeyRotation)
	}

	// An operator may create one, not start it.
	d.CreateOperation(t, Operator, "rotate-by-operator", "clusterName: demo\ntype: key-rotation")
	out, err = CP.KubectlWithInput(ctx, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosOperation"}`),
		append(Operator, "create", "--raw", "/apis/ichor.dev/v1alpha1/namespaces/"+d.Ns+"/talosoperations/rotate-by-operator/start", "-f", "-")...)
	if msg := out + ErrString(err); err == nil || !strings.Contains(msg, "forbidden") || !strings.Contains(msg, `subresource "key-rotation"`) {
		t.Errorf("an operator started a key-rotation: %v\n%s", err, out)
	}
	// The default is the disk-encryption key.
	if out := MustKubectl(ctx, t, append(Operator, "-n", d.Ns, "get", "talosoperation", "rotate-by-operator", "-o", "jsonpath={.spec.keyRotation.keys}")...); out != `["diskEncryption"]` {
		t.Errorf("defaulted keys %s", out)
	}

	bootIDs := map[string]string{}
	for name, n := range d.Nodes {
		bootIDs[name] = n.BootID()
	}
	d.CreateOperation(t, Admin, "rotate-dry", "clusterName: demo\ntype: key-rotation\nkeyRotation: {dryRun: true}")
	d.StartOperation(t, Admin, "rotate-dry")
	op := d.WaitOperationEnds(t, "rotate-dry", v1alpha1.OperationSucceeded)
	for _, s := range op.Status.Steps {
		if !strings.HasPrefix(s.Message, "dry run: ") {
			t.Errorf("dry run step %s: %q", s.Name(), s.Message)
		}
	}
	for name, n := range d.Nodes {
		if n.BootID() != bootIDs[name] {
			t.Errorf("a dry run rebooted %s", name)
		}
	}
	wantSlots(0)

	since := time.Now()
	d.CreateOperation(t, Admin, "rotate-disk-key", "clusterName: demo\ntype: key-rotation")
	d.StartOperation(t, Admin, "rotate-disk-key")
	op = d.WaitOperationEnds(t, "rotate-disk-key", v1alpha1.OperationSucceeded)
	if len(op.Status.Steps) != 2*len(d.Nodes) {
		t.Errorf("%d steps, want %d: %s", len(op.Status.Steps), 2*len(d.Nodes), DescribeOperation(op))
	}
	wantSlots(1)
	for name, n := range d.Nodes {
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
	if most, when := MostAwayAtOnce(d.Nodes, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
	}
	c := GetCluster(t, d.Ns, "demo")
	if c.Status.DiskKeySlot != 1 || c.Status.DiskKeyRotation != nil {
		t.Errorf("cluster: slot %d, rotation %+v", c.Status.DiskKeySlot, c.Status.DiskKeyRotation)
	}
	WaitEvent(ctx, t, d.Ns, "demo", corev1.EventTypeNormal, v1alpha1.EventDiskKeyRotated)

	// talosctl, as a reader, sees what the node opened its volumes with.
	out, err = d.Talosctl(t)(d.DownloadReaderTalosconfig(t), "get", "volumestatus", "EPHEMERAL", "-o", "yaml")
	if err != nil || !strings.Contains(out, "encryptionProvider: luks2") || !strings.Contains(out, "encryptionSlot: 1") {
		t.Errorf("talosctl get volumestatus EPHEMERAL: %v\n%s", err, out)
	}
}

// ErrString is err's message, "" for nil.
func ErrString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
