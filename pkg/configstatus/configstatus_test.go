package configstatus

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestOwnedConditions: intake's certificate and reachability conditions
// are the config reconciler's to write only once the machine has a config.
func TestOwnedConditions(t *testing.T) {
	m := &v1alpha1.TalosMachine{}
	if slices.Contains(ownedConditions(m), v1alpha1.MachineConditionCertificateVerified) {
		t.Error("a machine without a config: the certificate condition is intake's alone")
	}
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: "h"}
	for _, c := range []string{v1alpha1.MachineConditionConfigApplied, v1alpha1.MachineConditionReady,
		v1alpha1.MachineConditionCertificateVerified, v1alpha1.MachineConditionReachable} {
		if !slices.Contains(ownedConditions(m), c) {
			t.Errorf("a configured machine: %s is not written", c)
		}
	}
}

// TestConfigFromBeforeThePin: a config applied before the pin was sent to
// the node before its reset; one applied after, to the node as it is now.
func TestConfigFromBeforeThePin(t *testing.T) {
	pin := metav1.NewTime(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	before, after := metav1.NewTime(pin.Add(-time.Minute)), metav1.NewTime(pin.Add(time.Minute))
	for _, c := range []struct {
		what    string
		applied *v1alpha1.AppliedConfigStatus
		pinned  *v1alpha1.MaintenanceStatus
		want    bool
	}{
		{"no config", nil, &v1alpha1.MaintenanceStatus{SeenAt: pin}, false},
		{"no pin", &v1alpha1.AppliedConfigStatus{AppliedAt: before}, nil, false},
		{"applied before the pin", &v1alpha1.AppliedConfigStatus{AppliedAt: before}, &v1alpha1.MaintenanceStatus{SeenAt: pin}, true},
		{"applied after the pin", &v1alpha1.AppliedConfigStatus{AppliedAt: after}, &v1alpha1.MaintenanceStatus{SeenAt: pin}, false},
	} {
		m := &v1alpha1.TalosMachine{Status: v1alpha1.TalosMachineStatus{AppliedConfig: c.applied, Maintenance: c.pinned}}
		if got := ConfigFromBeforeThePin(m); got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}
}
