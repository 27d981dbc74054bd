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

// TestMachineAddressesAreUnique: Ichor refuses a second TalosMachine at an
// address another holds, so no two benchmark machines share one, in a
// namespace or across them, and a machine keeps its address.
func TestMachineAddressesAreUnique(t *testing.T) {
	seen := map[string]string{}
	for _, ns := range []string{"bench-unique-a", "bench-unique-b"} {
		for _, name := range []string{"machine-0", "protobuf-0", "machine-1"} {
			a := machine(ns, name, 0).Spec.Address
			if other, ok := seen[a]; ok {
				t.Errorf("%s/%s has the address %s of %s", ns, name, a, other)
			}
			seen[a] = ns + "/" + name
		}
	}
	if a, b := machine("bench-unique-a", "machine-0", 0).Spec.Address, machine("bench-unique-a", "machine-0", 3).Spec.Address; a != b {
		t.Errorf("a machine has two addresses: %s, %s", a, b)
	}
}
