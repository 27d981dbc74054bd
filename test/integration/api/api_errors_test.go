package api

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

func TestAPIInvalidObjects(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	ichor := itest.APIClient(t).IchorV1alpha1()

	t.Run("TalosCluster", func(t *testing.T) {
		bad := itest.APITalosCluster("bad", ns)
		bad.Spec.TalosVersion = "1.13.0"                        // no leading v
		bad.Spec.ControlPlane.Endpoint = "http://10.5.0.2:6443" // not https
		_, err := ichor.TalosClusters(ns).Create(ctx, bad, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("want 422 Invalid, got %v", err)
		}
		status := itest.APIStatus(t, err)
		if status.Code != http.StatusUnprocessableEntity || status.Reason != metav1.StatusReasonInvalid {
			t.Errorf("status code %d reason %s, want 422 Invalid", status.Code, status.Reason)
		}
		if d := status.Details; d.Kind != "TalosCluster" || d.Group != v1alpha1.GroupName || d.Name != "bad" {
			t.Errorf("details name %s/%s %s, want ichor.dev/TalosCluster bad", d.Group, d.Kind, d.Name)
		}
		if fields := itest.APICauseFields(t, err); !slices.Equal(fields, []string{"spec.controlPlane.endpoint", "spec.talosVersion"}) {
			t.Errorf("cause fields = %v, want [spec.controlPlane.endpoint spec.talosVersion]", fields)
		}
		for _, c := range status.Details.Causes {
			if c.Type != metav1.CauseTypeFieldValueInvalid {
				t.Errorf("cause %s has type %s, want %s", c.Field, c.Type, metav1.CauseTypeFieldValueInvalid)
			}
		}
		if _, err := ichor.TalosClusters(ns).Get(ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("invalid cluster was stored: get gave %v", err)
		}
	})

	t.Run("IchorInstallationName", func(t *testing.T) {
		in := itest.APIIchorInstallation()
		in.Name = "not-ichor"
		_, err := ichor.IchorInstallations().Create(ctx, in, metav1.CreateOptions{})
		if err == nil {
			_ = ichor.IchorInstallations().Delete(ctx, in.Name, metav1.DeleteOptions{})
		}
		if !apierrors.IsInvalid(err) {
			t.Fatalf("installation named %s: want 422 Invalid, got %v", in.Name, err)
		}
		if fields := itest.APICauseFields(t, err); !slices.Equal(fields, []string{"metadata.name"}) {
			t.Errorf("cause fields = %v, want [metadata.name]", fields)
		}
	})

	t.Run("TalosMachineClusterImmutable", func(t *testing.T) {
		m, err := ichor.TalosMachines(ns).Create(ctx, itest.APITalosMachine("assigned", ns, "alpha"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.Spec.ClusterName = "beta"
		_, err = ichor.TalosMachines(ns).Update(ctx, m, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("moving a machine to another cluster: want 422 Invalid, got %v", err)
		}
		if fields := itest.APICauseFields(t, err); !slices.Equal(fields, []string{"spec.clusterName"}) {
			t.Errorf("cause fields = %v, want [spec.clusterName]", fields)
		}
	})

	t.Run("TalosMachineStatus", func(t *testing.T) {
		m, err := ichor.TalosMachines(ns).Create(ctx, itest.APITalosMachine("bad-status", ns, ""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.Status.Phase = "Exploded"
		_, err = ichor.TalosMachines(ns).UpdateStatus(ctx, m, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("unknown phase through /status: want 422 Invalid, got %v", err)
		}
		if fields := itest.APICauseFields(t, err); !slices.Equal(fields, []string{"status.phase"}) {
			t.Errorf("cause fields = %v, want [status.phase]", fields)
		}
	})
}

func TestAPIFieldValidation(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	warnings := &itest.APIWarnings{}
	cfg := rest.CopyConfig(itest.CP.AdminConfig)
	cfg.WarningHandler = warnings
	client := itest.APIClientFor(t, cfg).IchorV1alpha1()

	post := func(mode, body string) error {
		return client.RESTClient().Post().Namespace(ns).Resource("talosmachines").
			Param("fieldValidation", mode).SetHeader("Content-Type", "application/json").
			Body([]byte(body)).Do(ctx).Error()
	}
	unknown := func(name string) string {
		return `{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosMachine","metadata":{"name":"` + name +
			`"},"spec":{"address":"10.5.0.30:50000","bogusField":"x"}}`
	}

	err := post("Strict", unknown("strict"))
	if !apierrors.IsBadRequest(err) {
		t.Fatalf("Strict with an unknown field: want 400 BadRequest, got %v", err)
	}
	if !strings.Contains(err.Error(), `unknown field "spec.bogusField"`) {
		t.Errorf("Strict error does not name the unknown field: %v", err)
	}
	if _, err := client.TalosMachines(ns).Get(ctx, "strict", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("refused object was stored: get gave %v", err)
	}

	dup := `{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosMachine","metadata":{"name":"dup"},"spec":{"address":"10.5.0.30:50000","address":"10.5.0.31:50000"}}`
	if err := post("Strict", dup); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `duplicate field "spec.address"`) {
		t.Errorf("Strict with a duplicate field: want 400 naming spec.address, got %v", err)
	}

	if n := len(warnings.All()); n != 0 {
		t.Fatalf("warnings before the Warn request: %v", warnings.All())
	}
	if err := post("Warn", unknown("warned")); err != nil {
		t.Fatalf("Warn with an unknown field: %v", err)
	}
	got := warnings.All()
	if !slices.ContainsFunc(got, func(w string) bool { return strings.Contains(w, `unknown field "spec.bogusField"`) }) {
		t.Errorf("warnings = %q, want one naming spec.bogusField", got)
	}
	m, err := client.TalosMachines(ns).Get(ctx, "warned", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("object created with Warn: %v", err)
	}
	if m.Spec.Address != "10.5.0.30:50000" {
		t.Errorf("address = %q, want 10.5.0.30:50000", m.Spec.Address)
	}

	before := len(warnings.All())
	if err := post("Ignore", unknown("ignored")); err != nil {
		t.Fatalf("Ignore with an unknown field: %v", err)
	}
	// Only field validation is under test: the address is outside the
	// (absent) provisioning networks, which the admin is warned of.
	if after := slices.DeleteFunc(warnings.All()[before:], func(w string) bool { return !strings.Contains(w, "field") }); len(after) != 0 {
		t.Errorf("Ignore produced warnings: %q", after)
	}
}

func TestAPIStaleResourceVersion(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	machines := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns)

	original, err := machines.Create(ctx, itest.APITalosMachine("stale", ns, "alpha"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fresh := original.DeepCopy()
	fresh.Spec.Hostname = "first"
	if _, err := machines.Update(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("first update: %v", err)
	}

	stale := original.DeepCopy()
	stale.Spec.Hostname = "second"
	_, err = machines.Update(ctx, stale, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("update with stale resourceVersion %s: want 409 Conflict, got %v", original.ResourceVersion, err)
	}
	stale.Status.Phase = v1alpha1.MachinePhaseReady
	if _, err := machines.UpdateStatus(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("status update with stale resourceVersion: want 409 Conflict, got %v", err)
	}
	rv := original.ResourceVersion
	if err := machines.Delete(ctx, "stale", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}); !apierrors.IsConflict(err) {
		t.Errorf("delete with stale resourceVersion precondition: want 409 Conflict, got %v", err)
	}
	uid := types.UID("00000000-0000-0000-0000-000000000000")
	if err := machines.Delete(ctx, "stale", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); !apierrors.IsConflict(err) {
		t.Errorf("delete with wrong uid precondition: want 409 Conflict, got %v", err)
	}

	got, err := machines.Get(ctx, "stale", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Hostname != "first" || got.Status.Phase != "" || got.Generation != 2 {
		t.Errorf("stored: hostname %q phase %q generation %d, want first, empty, 2", got.Spec.Hostname, got.Status.Phase, got.Generation)
	}
}
