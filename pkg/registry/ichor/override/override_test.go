package override

import (
	"strings"
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor"
)

func TestValidate(t *testing.T) {
	checks := []ichor.SafetyCheck{ichor.CheckControlPlaneQuorum}
	for _, tc := range []struct {
		name string
		body ichor.Override
		want []string
	}{
		{"good", ichor.Override{Check: ichor.CheckControlPlaneQuorum, Reason: "cp-3 is gone"}, nil},
		{"no check", ichor.Override{Reason: "x"}, []string{"check: Required value"}},
		{"a check of another kind", ichor.Override{Check: ichor.CheckPatchSecrets, Reason: "x"},
			[]string{`check: Unsupported value: "PatchSecrets": supported values: "ControlPlaneQuorum"`}},
		{"no reason", ichor.Override{Check: ichor.CheckControlPlaneQuorum}, []string{"reason: Required value"}},
		{"a reason too long", ichor.Override{Check: ichor.CheckControlPlaneQuorum, Reason: strings.Repeat("x", maxReasonLength+1)},
			[]string{"reason: Too long"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := validate(&tc.body, checks)
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d", errs, len(tc.want))
			}
			for i, want := range tc.want {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %q, want %q", errs[i].Error(), want)
				}
			}
		})
	}
}

func TestKeepGranted(t *testing.T) {
	stored := &ichor.OverrideStatus{Check: ichor.CheckControlPlaneQuorum, By: "carol", Reason: "x"}
	forged := &ichor.OverrideStatus{Check: ichor.CheckPatchSecrets, By: "mallory", Reason: "y"}

	got := forged
	KeepGranted(&got, stored)
	if got != stored {
		t.Errorf("/status changed a granted override to %+v", got)
	}
	got = forged
	KeepGranted(&got, nil)
	if got != nil {
		t.Errorf("/status granted an override: %+v", got)
	}
	got = nil
	KeepGranted(&got, stored)
	if got != nil {
		t.Error("/status could not clear a used override")
	}
}
