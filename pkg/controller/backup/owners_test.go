package backup

import (
	"testing"

	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
)

// TestWriteStatusKeepsToItsRow: the scheduler applies its row of the table
// of status writers, all of it and nothing else.
func TestWriteStatusKeepsToItsRow(t *testing.T) {
	c, applied := statusapplytest.Client(t)
	s := &Scheduler{Client: c}
	cluster := statusapplytest.Cluster()
	before := cluster.Status.DeepCopy()
	before.Backup = nil
	if err := s.writeStatus(t.Context(), cluster, before); err != nil {
		t.Fatal(err)
	}
	applied.CheckOwned(t, true)
}
