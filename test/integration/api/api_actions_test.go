package api

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/integration/itest"
)

// These tests drive the action subresources — start, reclaim, override —
// through the aggregator as the roles in artifacts/ allow, with the typed
// client and with kubectl.

func TestStartNeedsTheStartVerbOnTheOperationsType(t *testing.T) {
	ns := itest.CP.Namespace(t)
	ctx := itest.APIContext(t)
	operator := itest.APIClientFor(t, itest.CP.ConfigFor("olivia", "ichor:operator")).IchorV1alpha1().TalosOperations(ns)
	admin := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosOperations(ns)
	for _, op := range []struct {
		name string
		typ  v1alpha1.OperationType
	}{{"reboot-all", v1alpha1.OperationReboot}, {"rotate-ca", v1alpha1.OperationCARotation}} {
		if _, err := operator.Create(ctx, &v1alpha1.TalosOperation{
			ObjectMeta: metav1.ObjectMeta{Name: op.name},
			Spec:       v1alpha1.TalosOperationSpec{ClusterName: "prod", Type: op.typ},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("operator creates %s: %v", op.name, err)
		}
	}

	// A dry run answers as the start would, and changes nothing.
	dry, err := operator.Start(ctx, "reboot-all", &v1alpha1.TalosOperation{}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil || dry.Status.StartedBy != "olivia" {
		t.Fatalf("dry-run start: %+v, %v", dry, err)
	}
	if got, _ := operator.Get(ctx, "reboot-all", metav1.GetOptions{}); got.Status.StartedAt != nil {
		t.Fatal("a dry-run start was stored")
	}

	// A uid in the body is a precondition: an operation deleted and made
	// again under its name since the start was confirmed is not started.
	confirmed, err := operator.Get(ctx, "reboot-all", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = operator.Start(ctx, "reboot-all", &v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: "reboot-all", UID: "5b6f2a0e-0000-4000-8000-000000000000"}}, metav1.CreateOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "deleted and made again") {
		t.Errorf("start with another object's uid: %v, want Conflict", err)
	}
	started, err := operator.Start(ctx, "reboot-all", &v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: "reboot-all", UID: confirmed.UID}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("operator starts a reboot: %v", err)
	}
	if started.Status.StartedBy != "olivia" || started.Status.StartedAt == nil || started.Status.Phase != v1alpha1.OperationPending ||
		!meta.IsStatusConditionTrue(started.Status.Conditions, "Started") {
		t.Errorf("started operation status %+v", started.Status)
	}
	itest.WaitEventSaying(ctx, t, ns, "reboot-all", corev1.EventTypeNormal, "Started", "olivia started the reboot operation")

	_, err = admin.Start(ctx, "reboot-all", &v1alpha1.TalosOperation{}, metav1.CreateOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "already started by olivia") {
		t.Errorf("second start: %v, want Conflict naming olivia", err)
	}

	_, err = operator.Start(ctx, "rotate-ca", &v1alpha1.TalosOperation{}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `needs the "start" verb on resource "talosoperations", subresource "ca-rotation"`) {
		t.Errorf("operator starts a CA rotation: %v, want Forbidden naming talosoperations/ca-rotation", err)
	}
	_, err = operator.Start(ctx, "absent", &v1alpha1.TalosOperation{}, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("start of an absent operation: %v, want NotFound", err)
	}
	_, err = admin.Start(ctx, "rotate-ca", &v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: "reboot-all"}}, metav1.CreateOptions{})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("start with a body naming another operation: %v, want BadRequest", err)
	}

	// kubectl, as an admin: a named create on the subresource.
	out, err := itest.CP.KubectlWithInput(ctx, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosOperation"}`),
		"--as=carol", "--as-group=ichor:admin", "create", "--raw",
		"/apis/ichor.dev/v1alpha1/namespaces/"+ns+"/talosoperations/rotate-ca/start", "-f", "-")
	if err != nil || !strings.Contains(out, `"startedBy":"carol"`) {
		t.Fatalf("kubectl create --raw …/start as an admin: %v\n%s", err, out)
	}
}

func TestReclaimNeedsTheReclaimVerb(t *testing.T) {
	ns := itest.CP.Namespace(t)
	ctx := itest.APIContext(t)
	admin := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().MachineReclaims(ns)
	if _, err := admin.Create(ctx, &v1alpha1.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Name: "take-m7"},
		Spec: v1alpha1.MachineReclaimSpec{
			MachineRef: &v1alpha1.MachineReference{Namespace: "elsewhere", Name: "m7"}, ClusterName: "prod", Role: v1alpha1.MachineRoleWorker,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	operator := itest.APIClientFor(t, itest.CP.ConfigFor("olivia", "ichor:operator")).IchorV1alpha1().MachineReclaims(ns)
	if _, err := operator.Reclaim(ctx, "take-m7", &v1alpha1.MachineReclaim{}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("operator reclaims: %v, want Forbidden", err)
	}

	// ichor-machine-reclaimer is delegable on its own.
	kube := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reclaimers"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ichor-machine-reclaimer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "team:reclaimers"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reclaimer := itest.APIClientFor(t, itest.CP.ConfigFor("rita", "team:reclaimers")).IchorV1alpha1().MachineReclaims(ns)
	var got *v1alpha1.MachineReclaim
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = reclaimer.Reclaim(ctx, "take-m7", &v1alpha1.MachineReclaim{}, metav1.CreateOptions{})
		return err == nil, itest.Client403Only(err) // RBAC caches may lag the binding a moment
	})
	if err != nil {
		t.Fatalf("reclaimer reclaims: %v", err)
	}
	if got.Status.ReclaimedBy != "rita" || got.Status.StartedAt == nil || !meta.IsStatusConditionTrue(got.Status.Conditions, "Started") {
		t.Errorf("reclaim status %+v", got.Status)
	}
	itest.WaitEventSaying(ctx, t, ns, "take-m7", corev1.EventTypeNormal, "Started", "rita started reclaiming")
}

func TestOverrideLetsOneChangePastItsCheck(t *testing.T) {
	ns := itest.CP.Namespace(t)
	ctx := itest.APIContext(t)
	operator := itest.APIClientFor(t, itest.CP.ConfigFor("olivia", "ichor:operator")).IchorV1alpha1().TalosConfigPatches(ns)
	admin := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosConfigPatches(ns)
	const harmless = "machine:\n  sysctls:\n    vm.swappiness: \"10\"\n"
	const touchesCA = "cluster:\n  ca:\n    crt: Zm9v\n    key: YmFy\n"
	p, err := operator.Create(ctx, &v1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Name: "tuning"},
		Spec:       v1alpha1.TalosConfigPatchSpec{ClusterName: "prod", Patch: harmless},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	touch := func(c interface {
		Get(context.Context, string, metav1.GetOptions) (*v1alpha1.TalosConfigPatch, error)
		Update(context.Context, *v1alpha1.TalosConfigPatch, metav1.UpdateOptions) (*v1alpha1.TalosConfigPatch, error)
	}, text string) (*v1alpha1.TalosConfigPatch, error) {
		cur, err := c.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		cur.Spec.Patch = text
		return c.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if _, err := touch(operator, touchesCA); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "override subresource (check PatchSecrets)") {
		t.Fatalf("patch touching the CA: %v, want Invalid pointing at the override", err)
	}

	// Only admins override, only known checks, and always with a reason.
	override := &v1alpha1.Override{Check: v1alpha1.CheckPatchSecrets, Reason: "restoring the CA from the old bundle by hand"}
	if _, err := operator.Override(ctx, p.Name, override, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("operator overrides: %v, want Forbidden", err)
	}
	// create on the subresource alone is not enough: admission asks for the override verb.
	itest.GrantRole(ctx, t, ns, "override-posters",
		rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "team:override-posters"},
		rbacv1.PolicyRule{APIGroups: []string{"ichor.dev"}, Resources: []string{"talosconfigpatches/override"}, Verbs: []string{"create"}})
	poster := itest.APIClientFor(t, itest.CP.ConfigFor("paul", "team:override-posters")).IchorV1alpha1().TalosConfigPatches(ns)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := poster.Override(ctx, p.Name, override, metav1.CreateOptions{})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), `needs the "override" verb on resource "talosconfigpatches"`), nil
	})
	if err != nil {
		t.Errorf("create on talosconfigpatches/override without the override verb was not refused by admission: %v", err)
	}
	for _, bad := range []struct {
		body *v1alpha1.Override
		want string
	}{
		{&v1alpha1.Override{Check: v1alpha1.CheckControlPlaneQuorum, Reason: "x"}, `Unsupported value: "ControlPlaneQuorum": supported values: "PatchSecrets"`},
		{&v1alpha1.Override{Check: v1alpha1.CheckPatchSecrets}, "reason: Required value"},
	} {
		if _, err := admin.Override(ctx, p.Name, bad.body, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("override %+v: %v, want Invalid with %q", bad.body, err, bad.want)
		}
	}
	// An admin cannot grant one through /status either.
	cur, _ := admin.Get(ctx, p.Name, metav1.GetOptions{})
	cur.Status.Override = &v1alpha1.OverrideStatus{Check: v1alpha1.CheckPatchSecrets, Reason: "sneaky", By: "carol", At: metav1.Now()}
	if got, err := itest.APIClient(t).IchorV1alpha1().TalosConfigPatches(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil && got.Status.Override != nil {
		t.Error("/status granted an override")
	}

	granted, err := admin.Override(ctx, p.Name, override, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("admin overrides: %v", err)
	}
	if g := granted.Status.Override; g == nil || g.By != "carol" || g.Check != v1alpha1.CheckPatchSecrets || g.Reason != override.Reason {
		t.Fatalf("status.override = %+v", g)
	}
	itest.WaitEventSaying(ctx, t, ns, "tuning", corev1.EventTypeWarning, "OverrideGranted", "carol lets the next change of TalosConfigPatch tuning go past the PatchSecrets check")

	// The next change goes through, with a warning, and uses the override up.
	out, err := itest.CP.Kubectl(ctx, "--as=olivia", "--as-group=ichor:operator", "-n", ns, "patch", "talosconfigpatch", "tuning",
		"--type=merge", "-p", `{"spec":{"patch":"cluster:\n  ca:\n    crt: Zm9v\n    key: YmFy\n"}}`)
	var kerr *harness.KubectlError
	stderr := ""
	if errors.As(err, &kerr) {
		stderr = kerr.Stderr
	}
	if err != nil {
		t.Fatalf("change past the override: %v %s\n%s", err, stderr, out)
	}
	after, err := operator.Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil || after.Spec.Patch != touchesCA || after.Status.Override != nil {
		t.Fatalf("after the change: patch %q, override %+v, %v", after.Spec.Patch, after.Status.Override, err)
	}
	if _, err := touch(operator, touchesCA+"  # again\n"); !apierrors.IsInvalid(err) {
		t.Errorf("a second change after the override was used: %v, want Invalid", err)
	}
}
