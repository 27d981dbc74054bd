package api

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

func TestMachineAddressesStayInTheProvisioningNetworks(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	itest.UseProvisioningNetworks(ctx, t, "10.5.0.0/24")
	machines := itest.APIClientFor(t, itest.OperatorClient(t)).IchorV1alpha1().TalosMachines(ns)

	for _, address := range []string{"10.9.0.1:50000", "attacker.example.com:50000", "127.0.0.1:50000"} {
		m := itest.APITalosMachine("outside", ns, "alpha")
		m.Spec.Address = address
		_, err := machines.Create(ctx, m, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.address") || !strings.Contains(err.Error(), "only an admin") {
			t.Errorf("operator's machine at %s: want Forbidden on spec.address, got %v", address, err)
		}
	}
	if _, err := machines.Get(ctx, "outside", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused machine was stored: %v", err)
	}

	m, err := machines.Create(ctx, itest.APITalosMachine("inside", ns, "alpha"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("operator's machine inside the network: %v", err)
	}
	m.Spec.Address = "10.9.0.1:50000"
	if _, err := machines.Update(ctx, m, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("operator moving a machine out of the network: want Forbidden, got %v", err)
	}

	// An admin may, and is told so.
	warnings := &itest.APIWarnings{}
	cfg := rest.CopyConfig(itest.CP.ConfigFor("carol", "ichor:admin"))
	cfg.WarningHandler = warnings
	out := itest.APITalosMachine("exception", ns, "alpha")
	out.Spec.Address = "10.9.0.1:50000"
	if _, err := itest.APIClientFor(t, cfg).IchorV1alpha1().TalosMachines(ns).Create(ctx, out, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin's machine outside the network: %v", err)
	}
	if w := strings.Join(warnings.All(), "\n"); !strings.Contains(w, "outside the provisioning networks") || !strings.Contains(w, "carol holds the override verb") {
		t.Errorf("admin's warnings: %q", w)
	}
}

func TestAdminOnlyFieldsOnCreate(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	operator := itest.APIClientFor(t, itest.OperatorClient(t)).IchorV1alpha1().TalosClusters(ns)
	for _, tc := range []struct {
		field, subresource string
		mutate             func(*v1alpha1.TalosCluster)
	}{
		{"spec.secretsRef", "secret-references", func(c *v1alpha1.TalosCluster) {
			c.Spec.SecretsRef = &v1alpha1.LocalSecretReference{Name: "prod-secrets"}
		}},
		{"spec.ciliumValues", "cilium-values", func(c *v1alpha1.TalosCluster) {
			c.Spec.Network.CNI.Name = v1alpha1.CNICilium
			c.Spec.CiliumValues = "ipam: {mode: kubernetes}\n"
		}},
		{"spec.authentication", "authentication", func(c *v1alpha1.TalosCluster) {
			c.Spec.Authentication = &v1alpha1.ClusterAuthentication{IssuerURL: "https://issuer.example.com", ClientID: "k8s"}
		}},
		{"spec.security.secureBoot.installerImage", "installer-image", func(c *v1alpha1.TalosCluster) {
			c.Spec.Security.SecureBoot.InstallerImage = "factory.example/installer-secureboot/abc"
		}},
		{"spec.schematic", "schematic", func(c *v1alpha1.TalosCluster) {
			c.Spec.Schematic = &v1alpha1.Schematic{ExtraKernelArgs: []string{"init=/bin/sh"}}
		}},
	} {
		c := itest.APITalosCluster("shared", ns)
		tc.mutate(c)
		_, err := operator.Create(ctx, c, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot set "+tc.field+" on create") ||
			!strings.Contains(err.Error(), `subresource "`+tc.subresource+`"`) {
			t.Errorf("operator's cluster with %s: want Forbidden naming talosclusters/%s, got %v", tc.field, tc.subresource, err)
		}
		if _, err := itest.APIClient(t).IchorV1alpha1().TalosClusters(ns).Create(ctx, c, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("admin's cluster with %s: %v", tc.field, err)
		}
	}
	if _, err := operator.Create(ctx, itest.APITalosCluster("plain", ns), metav1.CreateOptions{}); err != nil {
		t.Errorf("operator's plain cluster: %v", err)
	}

	// A machine's own schematic, likewise: an operator places machines, an
	// admin chooses what they boot.
	itest.UseProvisioningNetworks(ctx, t, "10.5.0.0/24")
	m := itest.APITalosMachine("own-image", ns, "plain")
	m.Spec.Schematic = &v1alpha1.Schematic{SystemExtensions: []string{"siderolabs/iscsi-tools"}}
	machines := itest.APIClientFor(t, itest.OperatorClient(t)).IchorV1alpha1().TalosMachines(ns)
	if _, err := machines.Create(ctx, m, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `subresource "schematic"`) {
		t.Errorf("operator's machine with a schematic: want Forbidden naming talosmachines/schematic, got %v", err)
	}
	m.Spec.Schematic = nil
	if m, err := machines.Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Errorf("operator's plain machine: %v", err)
	} else {
		m.Spec.Schematic = &v1alpha1.Schematic{SystemExtensions: []string{"siderolabs/iscsi-tools"}}
		if _, err := machines.UpdateSchematic(ctx, m.Name, m, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("operator's talosmachines/schematic: want Forbidden, got %v", err)
		}
		if _, err := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns).UpdateSchematic(ctx, m.Name, m, metav1.UpdateOptions{}); err != nil {
			t.Errorf("admin's talosmachines/schematic: %v", err)
		}
	}
}

func TestMachineAddressIsFixedOnceDecided(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	admin := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns)
	m, err := admin.Create(ctx, itest.APITalosMachine("m1", ns, "alpha"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pin := func(m *v1alpha1.TalosMachine) *v1alpha1.TalosMachine {
		t.Helper()
		m.Status.Maintenance = &v1alpha1.MaintenanceStatus{CertificateFingerprint: "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=", SeenAt: metav1.Now()}
		out, err := admin.UpdateStatus(ctx, m, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	m = pin(m)

	// Before a decision, a new address drops what was learned at the old one.
	m.Spec.Address = "10.5.0.11:50000"
	if m, err = admin.Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if m.Status.Maintenance != nil {
		t.Errorf("the pin of the old address survived a move: %+v", m.Status.Maintenance)
	}
	m = pin(m)
	m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved}
	if m, err = admin.UpdateApproval(ctx, m.Name, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// After it, neither the address nor the expected certificate moves: a
	// worker pointed at a control plane and deleted would reset that.
	for field, mutate := range map[string]func(*v1alpha1.TalosMachine){
		"spec.address": func(m *v1alpha1.TalosMachine) { m.Spec.Address = "10.5.0.12:50000" },
		"spec.expectedFingerprint": func(m *v1alpha1.TalosMachine) {
			m.Spec.ExpectedFingerprint = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
		},
	} {
		changed := m.DeepCopy()
		mutate(changed)
		_, err := admin.Update(ctx, changed, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "the machine was approved") {
			t.Errorf("%s after approval: want Invalid, got %v", field, err)
			continue
		}
		if got := itest.APICauseFields(t, err); len(got) != 1 || got[0] != field {
			t.Errorf("%s after approval: causes %v", field, got)
		}
	}
}

// TestPasswordHashNeverInADeleteResponse deletes a user whose deletion is
// not immediate — a finalizer, foreground propagation, a dry run, a
// collection delete — and reads each raw response.
func TestPasswordHashNeverInADeleteResponse(t *testing.T) {
	ctx := itest.APIContext(t)
	users := itest.APIClient(t).IchorV1alpha1().IchorUsers()
	rc := itest.APIClient(t).IchorV1alpha1().RESTClient()
	const finalizer = "ichor.dev/test-holds"
	newUser := func(name string) {
		t.Helper()
		u := itest.APIIchorUser(name)
		u.Labels = map[string]string{itest.APITestLabel: name}
		u.Finalizers = []string{finalizer}
		if _, err := users.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = users.Patch(context.Background(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = users.Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		body := `{"apiVersion":"ichor.dev/v1alpha1","kind":"IchorUserPassword","metadata":{"name":"` + name + `"},"password":"a long enough password"}`
		if err := rc.Put().Resource("ichorusers").Name(name).SubResource("password").Body([]byte(body)).Do(ctx).Error(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, raw []byte, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if s := string(raw); strings.Contains(s, "passwordHash") || strings.Contains(s, "argon2") {
			t.Errorf("%s returned the hash: %s", what, s)
		} else if !strings.Contains(s, `"passwordSet":true`) {
			t.Errorf("%s returned no user: %s", what, s)
		}
	}
	foreground := metav1.DeletePropagationForeground
	for name, opts := range map[string]metav1.DeleteOptions{
		"pw-finalizer":  {},
		"pw-foreground": {PropagationPolicy: &foreground},
		"pw-dry-run":    {DryRun: []string{metav1.DryRunAll}},
	} {
		newUser(name)
		raw, err := rc.Delete().Resource("ichorusers").Name(name).Body(&opts).Do(ctx).Raw()
		check("DELETE "+name, raw, err)
	}
	newUser("pw-collection")
	raw, err := rc.Delete().Resource("ichorusers").Param("labelSelector", itest.APITestLabel+"=pw-collection").Do(ctx).Raw()
	check("DELETE collection", raw, err)
}

// TestStartIsDecidedOnTheOperationItStarts races an operator's start of a
// name against its creation as an admin-only type: whatever the
// interleaving, the operator never starts it.
func TestStartIsDecidedOnTheOperationItStarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ns := itest.CP.Namespace(t)
	operator := itest.APIClientFor(t, itest.OperatorClient(t)).IchorV1alpha1()
	start := func(name string) error {
		return operator.RESTClient().Post().Namespace(ns).Resource("talosoperations").Name(name).SubResource("start").
			Body([]byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosOperation"}`)).Do(ctx).Error()
	}
	if _, err := operator.TalosOperations(ns).Create(ctx, itest.APITalosOperation("rotate", ns, v1alpha1.OperationCARotation), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := start("rotate"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `subresource "ca-rotation"`) {
		t.Fatalf("operator's start of a ca-rotation: want Forbidden naming the type, got %v", err)
	}
	for i := range 20 {
		name := "race-" + string(rune('a'+i))
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 25 {
				if err := start(name); !apierrors.IsNotFound(err) {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := operator.TalosOperations(ns).Create(ctx, itest.APITalosOperation(name, ns, v1alpha1.OperationCARotation), metav1.CreateOptions{}); err != nil {
				t.Errorf("create %s: %v", name, err)
			}
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			if !apierrors.IsForbidden(err) {
				t.Errorf("start of %s: want NotFound or Forbidden, got %v", name, err)
			}
		}
		op, err := operator.TalosOperations(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if op.Status.StartedBy != "" {
			t.Fatalf("the operator started ca-rotation %s: %+v", name, op.Status)
		}
	}
}

// TestPatchBodiesAndPrivilegedPatches: viewers read no patch (bodies may
// hold registry credentials or WireGuard keys); operators write plain
// settings but neither write nor delete an admin's privileged patch.
func TestPatchBodiesAndPrivilegedPatches(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	p := itest.APITalosConfigPatch("pods", ns)
	p.Spec.Patch = "machine:\n  pods:\n    - {apiVersion: v1, kind: Pod, metadata: {name: p}}\n"
	if _, err := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosConfigPatches(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin's privileged patch: %v", err)
	}

	viewer := itest.APIClientFor(t, itest.CP.ConfigFor("vera", "ichor:viewer")).IchorV1alpha1().TalosConfigPatches(ns)
	if _, err := viewer.Get(ctx, "pods", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("viewer get of a patch: want Forbidden, got %v", err)
	}
	if _, err := viewer.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("viewer list of patches: want Forbidden, got %v", err)
	}

	operator := itest.APIClientFor(t, itest.OperatorClient(t)).IchorV1alpha1().TalosConfigPatches(ns)
	got, err := operator.Get(ctx, "pods", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("operator get of a patch: %v", err)
	}
	got.Spec.Disabled = true
	if _, err := operator.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "talosconfigpatches/privileged") {
		t.Errorf("operator disabling a privileged patch: want Forbidden, got %v", err)
	}
	if err := operator.Delete(ctx, "pods", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("operator deleting a privileged patch: want Forbidden, got %v", err)
	}
	hidden := itest.APITalosConfigPatch("hidden-pods", ns)
	hidden.Spec.Patch = "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: n1\nauto: off\n---\nmachine:\n  pods:\n    - {apiVersion: v1, kind: Pod, metadata: {name: p}}\n"
	if _, err := operator.Create(ctx, hidden, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "machine.pods") {
		t.Errorf("operator's static pod behind a plain document: want Forbidden naming machine.pods, got %v", err)
	}
	plain := itest.APITalosConfigPatch("sysctls", ns)
	plain.Spec.Patch = "machine:\n  sysctls:\n    net.core.somaxconn: \"1024\"\n"
	if _, err := operator.Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Errorf("operator's plain patch: %v", err)
	}
}

// TestReclaimNeedsTheSourceMachine: a reclaimer delegated in one namespace
// cannot reclaim (reset and take) a machine of a namespace it has no rights in.
func TestReclaimNeedsTheSourceMachine(t *testing.T) {
	ctx := itest.APIContext(t)
	ns, other := itest.CP.Namespace(t), itest.CP.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reclaimer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ichor-machine-reclaimer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "rita"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := itest.APIClient(t).IchorV1alpha1().TalosMachines(other).Create(ctx, itest.APITalosMachine("node-1", other, "theirs"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reclaims := itest.APIClientFor(t, itest.CP.ConfigFor("rita")).IchorV1alpha1().MachineReclaims(ns)
	r := itest.APIMachineReclaim("take", ns)
	r.Spec.MachineRef = &v1alpha1.MachineReference{Namespace: other, Name: "node-1"}
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err = reclaims.Create(ctx, r, metav1.CreateOptions{})
		// RBAC sees the binding a moment later; until then the create itself is refused.
		return !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "reclaiming resets it"), nil
	})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `needs the "delete" verb on talosmachines "node-1" in namespace "`+other+`"`) {
		t.Fatalf("reclaimer's reclaim of another namespace's machine: want Forbidden, got %v", err)
	}
	if _, err := itest.APIClient(t).IchorV1alpha1().MachineReclaims(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin's reclaim: %v", err)
	}
}

// TestFinalizersEndpointWritesOnlyFinalizers: talosmachines/finalizers, the
// controller's only write of a machine beyond status, changes nothing else.
func TestFinalizersEndpointWritesOnlyFinalizers(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	machines := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns)
	m, err := machines.Create(ctx, itest.APITalosMachine("m1", ns, "alpha"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := `{"metadata":{"finalizers":["ichor.dev/test"],"labels":{"sneaky":"yes"}},"spec":{"address":"10.5.0.99:50000","role":"controlplane"}}`
	got := &v1alpha1.TalosMachine{}
	if err := itest.APIClient(t).IchorV1alpha1().RESTClient().Patch(types.MergePatchType).Namespace(ns).Resource("talosmachines").Name("m1").
		SubResource("finalizers").Body([]byte(patch)).Do(ctx).Into(got); err != nil {
		t.Fatalf("patch finalizers: %v", err)
	}
	if len(got.Finalizers) != 1 || got.Finalizers[0] != "ichor.dev/test" || got.Labels["sneaky"] != "" ||
		got.Spec != m.Spec || got.Generation != m.Generation {
		t.Errorf("the finalizers endpoint wrote more than finalizers: %+v %+v", got.ObjectMeta, got.Spec)
	}
	// Removing the last finalizer of a machine being deleted lets it go.
	if err := machines.Delete(ctx, "m1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := itest.APIClient(t).IchorV1alpha1().RESTClient().Patch(types.MergePatchType).Namespace(ns).Resource("talosmachines").Name("m1").
		SubResource("finalizers").Body([]byte(`{"metadata":{"finalizers":null}}`)).Do(ctx).Error(); err != nil {
		t.Fatalf("remove the finalizer: %v", err)
	}
	if _, err := machines.Get(ctx, "m1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after its last finalizer went: %v", err)
	}
}
