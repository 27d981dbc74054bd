package bootstraptoken

import (
	"testing"

	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
)

// TestWriteStatusKeepsToItsRow: the bootstrap token reconciler applies its
// row of the table of status writers, all of it and nothing else.
func TestWriteStatusKeepsToItsRow(t *testing.T) {
	c, applied := statusapplytest.Client(t)
	cluster := statusapplytest.Cluster()
	before := cluster.Status.DeepCopy()
	before.Conditions = nil
	if err := writeStatus(t.Context(), c, cluster, before); err != nil {
		t.Fatal(err)
	}
	applied.CheckOwned(t, true)
}
