package api

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	applyv1alpha1 "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

// TestSecurityDocumentsArePrivileged: the documents Ichor renders for disk
// encryption, and the volume, firewall and WireGuard settings beside them,
// are an admin's to write; an operator still writes an interface's addresses.
func TestSecurityDocumentsArePrivileged(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	operator := itest.APIClientFor(t, itest.OperatorClient(t)).IchorV1alpha1().TalosConfigPatches(ns)
	const wgKey = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq="
	for _, tc := range []struct{ name, patch string }{
		// A key slot the operator knows opens STATE, and every CA key in it, from a disk image.
		{"state-key-slot", "apiVersion: v1alpha1\nkind: VolumeConfig\nname: STATE\nencryption:\n  provider: luks2\n  keys:\n    - slot: 1\n      static: {passphrase: known}\n"},
		{"existing-volume", "apiVersion: v1alpha1\nkind: ExistingVolumeConfig\nname: state\ndiscovery:\n  volumeSelector:\n    match: volume.partition_label == \"STATE\"\n"},
		{"raw-volume", "apiVersion: v1alpha1\nkind: RawVolumeConfig\nname: raw\nprovisioning:\n  diskSelector:\n    match: system_disk\n  maxSize: 1GiB\n"},
		{"swap-volume", "apiVersion: v1alpha1\nkind: SwapVolumeConfig\nname: swap\nprovisioning:\n  diskSelector:\n    match: system_disk\n  maxSize: 1GiB\n"},
		{"firewall-default", "apiVersion: v1alpha1\nkind: NetworkDefaultActionConfig\ningress: accept\n"},
		{"firewall-rule", "apiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: etcd\nportSelector:\n  ports: [2379]\n  protocol: tcp\ningress:\n  - subnet: 0.0.0.0/0\n"},
		{"wireguard", "machine:\n  network:\n    interfaces:\n      - interface: wg0\n        wireguard:\n          privateKey: " + wgKey +
			"\n          peers:\n            - {publicKey: " + wgKey + ", endpoint: \"192.0.2.1:51820\", allowedIPs: [0.0.0.0/0]}\n"},
	} {
		p := itest.APITalosConfigPatch(tc.name, ns)
		p.Spec.Patch = tc.patch
		if _, err := operator.Create(ctx, p, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), itest.PrivilegedVerb) {
			t.Errorf("operator's %s patch: want Forbidden naming the privileged verb, got %v", tc.name, err)
		}
	}
	plain := itest.APITalosConfigPatch("addresses", ns)
	plain.Spec.Patch = "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [10.5.0.10/24]\n"
	if _, err := operator.Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Errorf("operator's interface addresses: %v", err)
	}
}

// TestRelabellingIntoAPrivilegedPatch: the machines an admin's
// selector-targeted privileged patch reaches change only by an admin's hand,
// whether labels are written by update, merge patch or server-side apply,
// added or removed, or set on a new machine. Labels that move no privileged
// patch stay an operator's.
func TestRelabellingIntoAPrivilegedPatch(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	itest.UseProvisioningNetworks(ctx, t, "10.5.0.0/24")
	admin := itest.APIClient(t).IchorV1alpha1()
	for _, p := range []struct{ name, pool, patch string }{
		{"gpu-pods", "gpu", "machine:\n  pods:\n    - {apiVersion: v1, kind: Pod, metadata: {name: p}}\n"},
		{"plain-sysctls", "plain", "machine:\n  sysctls:\n    net.core.somaxconn: \"1024\"\n"},
	} {
		patch := itest.APITalosConfigPatch(p.name, ns)
		patch.Spec.Target.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": p.pool}}
		patch.Spec.Patch = p.patch
		if _, err := admin.TalosConfigPatches(ns).Create(ctx, patch, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	operator := itest.APIClientFor(t, itest.OperatorClient(t)).IchorV1alpha1().TalosMachines(ns)
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), itest.PrivilegedVerb) || !strings.Contains(err.Error(), "gpu-pods") {
			t.Errorf("%s: want Forbidden naming gpu-pods and the privileged verb, got %v", what, err)
		}
	}

	m, err := operator.Create(ctx, itest.APITalosMachine("m1", ns, "alpha"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("operator's machine no privileged patch selects: %v", err)
	}
	into := m.DeepCopy()
	into.Labels = map[string]string{"pool": "gpu"}
	_, err = operator.Update(ctx, into, metav1.UpdateOptions{})
	refused("update into gpu-pods", err)
	_, err = operator.Patch(ctx, "m1", types.MergePatchType, []byte(`{"metadata":{"labels":{"pool":"gpu"}}}`), metav1.PatchOptions{})
	refused("merge patch into gpu-pods", err)
	_, err = operator.Apply(ctx, applyv1alpha1.TalosMachine("m1", ns).WithLabels(map[string]string{"pool": "gpu"}),
		metav1.ApplyOptions{FieldManager: "olivia", Force: true})
	refused("server-side apply into gpu-pods", err)
	if _, err := operator.Patch(ctx, "m1", types.MergePatchType, []byte(`{"metadata":{"labels":{"pool":"plain","team":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("operator's labels that move only a plain patch: %v", err)
	}

	gpu := itest.APITalosMachine("m2", ns, "alpha")
	gpu.Labels = map[string]string{"pool": "gpu"}
	_, err = operator.Create(ctx, gpu, metav1.CreateOptions{})
	refused("create inside gpu-pods", err)
	if _, err := operator.Get(ctx, "m2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused machine was stored: %v", err)
	}

	gpu.Name = "m3"
	if _, err := admin.TalosMachines(ns).Create(ctx, gpu, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin's machine inside gpu-pods: %v", err)
	}
	_, err = operator.Patch(ctx, "m3", types.MergePatchType, []byte(`{"metadata":{"labels":{"pool":null}}}`), metav1.PatchOptions{})
	refused("label removal out of gpu-pods", err)
	if _, err := operator.Patch(ctx, "m3", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("operator's label beside gpu-pods' own: %v", err)
	}
	if _, err := admin.TalosMachines(ns).Patch(ctx, "m1", types.MergePatchType, []byte(`{"metadata":{"labels":{"pool":"gpu"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("admin relabelling into gpu-pods: %v", err)
	}
}
