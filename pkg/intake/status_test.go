package intake

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
)

const (
	fpA = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
	fpB = "ypeBEsobvcr6wjGzmiPcTaeG7/gUfE5yuYB3ha/uSLs="
)

var t0 = metav1.NewTime(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))

func facts() *talos.Facts {
	return &talos.Facts{
		TalosVersion: "v1.13.0", UUID: "u-1", Serial: "s-1",
		Disks:     []talos.Disk{{Path: "/dev/sda", SizeBytes: 10 << 30, Model: "M", Serial: "D"}},
		Addresses: []netip.Prefix{netip.MustParsePrefix("10.5.0.2/24")},
	}
}

func ok(fp string) Result {
	return Result{Address: "10.5.0.2:50000", Facts: facts(), Fingerprint: fp}
}

func mismatch(pinned, presented string) Result {
	return Result{Address: "10.5.0.2:50000", Err: &talos.FingerprintMismatchError{Address: "10.5.0.2:50000", Pinned: pinned, Presented: presented}}
}

func unreachable() Result {
	return Result{Address: "10.5.0.2:50000", Err: errors.New("connection refused")}
}

func cond(t *testing.T, s *v1alpha1.TalosMachineStatus, typ string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(s.Conditions, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, s.Conditions)
	}
	return *c
}

func TestFirstContactPinsAndAwaitsApproval(t *testing.T) {
	var s v1alpha1.TalosMachineStatus
	ch := Record(&s, 3, ok(fpA), t0)
	if !ch.Pinned || ch.Mismatch != nil || ch.Unreachable || ch.Recovered {
		t.Errorf("change %+v, want Pinned only", ch)
	}
	if s.Maintenance == nil || s.Maintenance.CertificateFingerprint != fpA || !s.Maintenance.SeenAt.Equal(&t0) {
		t.Errorf("maintenance %+v", s.Maintenance)
	}
	if s.Phase != v1alpha1.MachinePhasePendingApproval || s.ObservedGeneration != 3 || s.TalosVersion != "v1.13.0" {
		t.Errorf("phase %s, observedGeneration %d, talosVersion %s", s.Phase, s.ObservedGeneration, s.TalosVersion)
	}
	hw := s.Hardware
	if hw == nil || hw.UUID != "u-1" || hw.Serial != "s-1" || !slices.Equal(hw.Addresses, []string{"10.5.0.2/24"}) ||
		!slices.Equal(hw.Disks, []v1alpha1.Disk{{Path: "/dev/sda", SizeBytes: 10 << 30, Model: "M", Serial: "D"}}) {
		t.Errorf("hardware %+v", hw)
	}
	for typ, want := range map[string]struct {
		status metav1.ConditionStatus
		reason string
	}{
		v1alpha1.MachineConditionReachable:           {metav1.ConditionTrue, v1alpha1.MachineReasonContacted},
		v1alpha1.MachineConditionCertificateVerified: {metav1.ConditionTrue, v1alpha1.MachineReasonPinnedOnFirstContact},
		v1alpha1.MachineConditionApproved:            {metav1.ConditionFalse, v1alpha1.MachineReasonAwaitingApproval},
	} {
		if c := cond(t, &s, typ); c.Status != want.status || c.Reason != want.reason || c.ObservedGeneration != 3 {
			t.Errorf("%s = %s/%s (generation %d), want %s/%s", typ, c.Status, c.Reason, c.ObservedGeneration, want.status, want.reason)
		}
	}

	// A later contact keeps the pin and its time, and announces nothing.
	later := metav1.NewTime(t0.Add(time.Minute))
	if ch := Record(&s, 3, ok(fpA), later); ch != (Change{}) {
		t.Errorf("second contact changed %+v", ch)
	}
	if !s.Maintenance.SeenAt.Equal(&t0) {
		t.Errorf("pin time moved to %v", s.Maintenance.SeenAt)
	}
}

func TestMismatchKeepsPinAndFactsAndWarnsOnce(t *testing.T) {
	var s v1alpha1.TalosMachineStatus
	Record(&s, 1, ok(fpA), t0)
	hw := s.Hardware

	ch := Record(&s, 1, mismatch(fpA, fpB), t0)
	if ch.Mismatch == nil || ch.Mismatch.Presented != fpB || ch.Pinned {
		t.Fatalf("change %+v, want a mismatch presenting %s", ch, fpB)
	}
	if s.Maintenance.CertificateFingerprint != fpA || s.Hardware != hw {
		t.Errorf("a mismatch changed the pin or the facts: %+v %+v", s.Maintenance, s.Hardware)
	}
	if c := cond(t, &s, v1alpha1.MachineConditionCertificateVerified); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.MachineReasonCertificateMismatch {
		t.Errorf("CertificateVerified = %+v", c)
	}
	if c := cond(t, &s, v1alpha1.MachineConditionReachable); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.MachineReasonCertificateMismatch {
		t.Errorf("Reachable = %+v", c)
	}
	if s.Phase != v1alpha1.MachinePhaseUnreachable {
		t.Errorf("phase %s", s.Phase)
	}
	if ch := Record(&s, 1, mismatch(fpA, fpB), t0); ch.Mismatch != nil {
		t.Error("the same impostor was announced twice")
	}

	// The real node is back.
	ch = Record(&s, 1, ok(fpA), t0)
	if !ch.Recovered || s.Phase != v1alpha1.MachinePhasePendingApproval {
		t.Errorf("change %+v, phase %s", ch, s.Phase)
	}
	if c := cond(t, &s, v1alpha1.MachineConditionCertificateVerified); c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.MachineReasonMatchesPin {
		t.Errorf("CertificateVerified = %+v", c)
	}
}

func TestUnreachable(t *testing.T) {
	var s v1alpha1.TalosMachineStatus
	ch := Record(&s, 1, unreachable(), t0)
	if !ch.Unreachable || s.Maintenance != nil || s.Hardware != nil || s.Phase != v1alpha1.MachinePhaseUnreachable {
		t.Errorf("change %+v, status %+v", ch, s)
	}
	if c := cond(t, &s, v1alpha1.MachineConditionReachable); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.MachineReasonConnectionFailed || c.Message != UnreachableMessage("10.5.0.2:50000") {
		t.Errorf("Reachable = %+v", c)
	}
	if c := cond(t, &s, v1alpha1.MachineConditionCertificateVerified); c.Status != metav1.ConditionUnknown {
		t.Errorf("CertificateVerified = %+v", c)
	}
	if ch := Record(&s, 1, unreachable(), t0); ch.Unreachable {
		t.Error("a machine still unreachable was announced again")
	}
}

func TestApprovalDecidesPhase(t *testing.T) {
	for _, tc := range []struct {
		approval *v1alpha1.ApprovalStatus
		phase    v1alpha1.MachinePhase
		status   metav1.ConditionStatus
		reason   string
	}{
		{nil, v1alpha1.MachinePhasePendingApproval, metav1.ConditionFalse, v1alpha1.MachineReasonAwaitingApproval},
		{&v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved, By: "ann"}, v1alpha1.MachinePhaseApproved, metav1.ConditionTrue, v1alpha1.MachineReasonApproved},
		{&v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalRejected, By: "bob"}, v1alpha1.MachinePhaseRejected, metav1.ConditionFalse, v1alpha1.MachineReasonRejected},
	} {
		s := v1alpha1.TalosMachineStatus{Approval: tc.approval}
		Record(&s, 1, ok(fpA), t0)
		if c := cond(t, &s, v1alpha1.MachineConditionApproved); s.Phase != tc.phase || c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("approval %+v: phase %s, Approved %s/%s", tc.approval, s.Phase, c.Status, c.Reason)
		}
	}
}

func TestInvalidVersionIsNotRecorded(t *testing.T) {
	s := v1alpha1.TalosMachineStatus{TalosVersion: "v1.12.0"}
	r := ok(fpA)
	r.Facts.TalosVersion = "1.13"
	Record(&s, 1, r, t0)
	if s.TalosVersion != "v1.12.0" {
		t.Errorf("talosVersion %q", s.TalosVersion)
	}
}

func TestRetryAfterGrowsWithTheOutage(t *testing.T) {
	var s v1alpha1.TalosMachineStatus
	const lo, hi = 5 * time.Second, 5 * time.Minute
	if got := RetryAfter(&s, t0.Time, lo, hi); got != lo {
		t.Errorf("never contacted: %v", got)
	}
	Record(&s, 1, unreachable(), t0)
	for _, tc := range []struct {
		elapsed, want time.Duration
	}{{0, lo}, {time.Second, lo}, {20 * time.Second, 20 * time.Second}, {time.Hour, hi}} {
		if got := RetryAfter(&s, t0.Add(tc.elapsed), lo, hi); got != tc.want {
			t.Errorf("after %v unreachable: retry in %v, want %v", tc.elapsed, got, tc.want)
		}
	}
}
