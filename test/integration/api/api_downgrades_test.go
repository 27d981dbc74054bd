package api

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

// TestOperatorsOnlyTightenHardening: an operator turns spec.security on,
// but turning any of it off, or a weaker disk-encryption key, is refused
// with the verb an admin holds; the admin may.
func TestOperatorsOnlyTightenHardening(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	operator := itest.APIClientFor(t, itest.OperatorClient(t)).IchorV1alpha1().TalosClusters(ns)
	c, err := operator.Create(ctx, itest.APITalosCluster("alpha", ns), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Tightening, one step after another, is an operator's.
	c.Spec.Security.DiskEncryption = &v1alpha1.DiskEncryption{Key: v1alpha1.DiskEncryptionKeyNodeID}
	if c, err = operator.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("operator turning disk encryption on: %v", err)
	}
	hardened := v1alpha1.ClusterSecurity{
		KubeletServingCertificates: v1alpha1.KubeletServingCertificates{Enabled: true, VerifyFromAPIServer: true},
		DiskEncryption:             &v1alpha1.DiskEncryption{Key: v1alpha1.DiskEncryptionKeyTPM},
		SecureBoot:                 v1alpha1.SecureBootRequirement{Required: true},
	}
	c.Spec.Security = *hardened.DeepCopy()
	if c, err = operator.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("operator turning every option on: %v", err)
	}

	const needs = `needs the "update" verb on resource "talosclusters", subresource "security-downgrade"`
	for field, weaken := range map[string]func(*v1alpha1.ClusterSecurity){
		"spec.security.kubeletServingCertificates.verifyFromAPIServer": func(s *v1alpha1.ClusterSecurity) {
			s.KubeletServingCertificates.VerifyFromAPIServer = false
		},
		"spec.security.kubeletServingCertificates.enabled": func(s *v1alpha1.ClusterSecurity) {
			s.KubeletServingCertificates = v1alpha1.KubeletServingCertificates{}
		},
		"spec.security.secureBoot.required": func(s *v1alpha1.ClusterSecurity) { s.SecureBoot.Required = false },
		"spec.security.diskEncryption":      func(s *v1alpha1.ClusterSecurity) { s.DiskEncryption = nil },
		"spec.security.diskEncryption.key": func(s *v1alpha1.ClusterSecurity) {
			s.DiskEncryption.Key = v1alpha1.DiskEncryptionKeyNodeID
		},
	} {
		w := c.DeepCopy()
		weaken(&w.Spec.Security)
		_, err := operator.Update(ctx, w, metav1.UpdateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), needs) || !strings.Contains(err.Error(), strings.TrimSuffix(field, ".key")) {
			t.Errorf("operator weakening %s: want Forbidden naming it and %s, got %v", field, needs, err)
		}
	}
	// kubectl patch goes the same way.
	_, err = operator.Patch(ctx, "alpha", types.MergePatchType, []byte(`{"spec":{"security":{"secureBoot":{"required":false}}}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), needs) {
		t.Errorf("operator's merge patch turning SecureBoot off: want Forbidden, got %v", err)
	}
	got, err := operator.Get(ctx, "alpha", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(got.Spec.Security, hardened) {
		t.Fatalf("a refused downgrade was stored: %+v", got.Spec.Security)
	}

	// The admin may, through the main endpoint.
	admin := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosClusters(ns)
	got.Spec.Security = v1alpha1.ClusterSecurity{}
	if _, err := admin.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("admin switching hardening off: %v", err)
	}
}

// TestOperatorsDeleteOnlyUnstartedOperations: deleting an operation someone
// started stops it after its step in flight, so it needs the start verb of
// its type, by name and by collection; a pending one nobody started and a
// finished one stay an operator's to delete.
func TestOperatorsDeleteOnlyUnstartedOperations(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	system := itest.APIClient(t).IchorV1alpha1().TalosOperations(ns)
	operator := itest.APIClientFor(t, itest.OperatorClient(t)).IchorV1alpha1().TalosOperations(ns)
	admin := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosOperations(ns)

	// newOperation creates a ca-rotation as the operator and, unless
	// phase is "", has the admin start it and the controller (played here)
	// take it to phase, holding it with its finalizer while it runs.
	newOperation := func(name string, phase v1alpha1.OperationPhase) {
		t.Helper()
		op := itest.APITalosOperation(name, ns, v1alpha1.OperationCARotation)
		op.Labels = map[string]string{itest.APITestLabel: name}
		if _, err := operator.Create(ctx, op, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if phase == "" {
			return
		}
		started, err := admin.Start(ctx, name, &v1alpha1.TalosOperation{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		started.Status.Phase = phase
		if _, err := system.UpdateStatus(ctx, started, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if phase == v1alpha1.OperationRunning {
			if err := itest.APIClient(t).IchorV1alpha1().RESTClient().Patch(types.MergePatchType).Namespace(ns).Resource("talosoperations").Name(name).
				SubResource("finalizers").Body([]byte(`{"metadata":{"finalizers":["ichor.dev/operation-step"]}}`)).Do(ctx).Error(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = itest.APIClient(t).IchorV1alpha1().RESTClient().Patch(types.MergePatchType).Namespace(ns).Resource("talosoperations").Name(name).
					SubResource("finalizers").Body([]byte(`{"metadata":{"finalizers":null}}`)).Do(context.Background()).Error()
			})
		}
	}
	newOperation("running", v1alpha1.OperationRunning)
	newOperation("pending", "")
	newOperation("failed", v1alpha1.OperationFailed)

	const needs = `needs the "start" verb on resource "talosoperations", subresource "ca-rotation"`
	err := operator.Delete(ctx, "running", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), needs) || !strings.Contains(err.Error(), "started by carol") {
		t.Errorf("operator deleting a running ca-rotation: want Forbidden naming %s, got %v", needs, err)
	}
	// Operators hold no deletecollection; a role that adds it (here) still
	// has each operation of the collection decided on its own.
	byLabel := func(name string) metav1.ListOptions {
		return metav1.ListOptions{LabelSelector: itest.APITestLabel + "=" + name}
	}
	if err := operator.DeleteCollection(ctx, metav1.DeleteOptions{}, byLabel("failed")); !apierrors.IsForbidden(err) {
		t.Errorf("operator's deletecollection: want Forbidden by RBAC, got %v", err)
	}
	itest.GrantRole(ctx, t, ns, "delete-operations", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "olivia"},
		rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"talosoperations"}, Verbs: []string{"deletecollection"}})
	// The binding is seen by the authorizer a moment later; a failed
	// operation is history, and goes.
	if pollErr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err = operator.DeleteCollection(ctx, metav1.DeleteOptions{}, byLabel("failed"))
		return err == nil, nil
	}); pollErr != nil {
		t.Fatalf("operator deleting a failed ca-rotation by collection: %v", err)
	}
	err = operator.DeleteCollection(ctx, metav1.DeleteOptions{}, byLabel("running"))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), needs) {
		t.Errorf("operator deleting a running ca-rotation by collection: want Forbidden naming %s, got %v", needs, err)
	}
	if op, err := operator.Get(ctx, "running", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if op.DeletionTimestamp != nil {
		t.Fatalf("a refused delete marked the operation deleted at %v", op.DeletionTimestamp)
	}

	if err := operator.Delete(ctx, "pending", metav1.DeleteOptions{}); err != nil {
		t.Errorf("operator deleting a pending ca-rotation nobody started: %v", err)
	}
	if _, err := operator.Get(ctx, "failed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the failed ca-rotation after the operator's delete: %v", err)
	}

	// The admin stops it; the controller's finalizer holds it until the step in flight ended.
	if err := admin.Delete(ctx, "running", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("admin deleting a running ca-rotation: %v", err)
	}
	if op, err := operator.Get(ctx, "running", metav1.GetOptions{}); err != nil {
		t.Fatalf("the controller's finalizer did not hold the operation: %v", err)
	} else if op.DeletionTimestamp == nil {
		t.Fatal("the admin's delete did not mark the operation deleted")
	}
}
