package disruption

import (
	"testing"

	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
)

// TestTakeKeepsToItsRow: taking the budget applies status.disruption
// alone, under its row of the table of status writers.
func TestTakeKeepsToItsRow(t *testing.T) {
	cluster := statusapplytest.Cluster()
	cluster.Status.Disruption = nil
	m := statusapplytest.Machine()
	c, applied := statusapplytest.Client(t, cluster, m)
	b := &Budget{Client: c, Reader: c}
	if holder, err := b.Acquire(t.Context(), m, "reboot"); err != nil || holder != nil {
		t.Fatalf("take the budget: holder %v, %v", holder, err)
	}
	applied.CheckOwned(t, true)
}
