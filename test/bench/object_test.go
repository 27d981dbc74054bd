package bench

import (
	"encoding/json"
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/apiserver"
)

// TestMachineIsRealisticAndValid keeps the benchmark's objects honest: about
// 3 KiB of JSON, and accepted by Ichor's validation for create and /status.
func TestMachineIsRealisticAndValid(t *testing.T) {
	for _, i := range []int{0, 1, 9999} {
		m := machine("bench-list-10000", "machine-1", i)
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(data); n < 2800 || n > 3600 {
			t.Errorf("machine %d is %d bytes of JSON, want about 3 KiB", i, n)
		}
		internal := &ichor.TalosMachine{}
		if err := apiserver.Scheme.Convert(m, internal, nil); err != nil {
			t.Fatal(err)
		}
		if errs := validation.ValidateTalosMachine(internal); len(errs) > 0 {
			t.Errorf("machine %d: %v", i, errs.ToAggregate())
		}
		internal.ResourceVersion = "1"
		if errs := validation.ValidateTalosMachineStatusUpdate(internal, internal); len(errs) > 0 {
			t.Errorf("machine %d status: %v", i, errs.ToAggregate())
		}
	}
}
