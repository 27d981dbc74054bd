package intake

import (
	"testing"

	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
)

// TestWriteStatusKeepsToItsRow: intake applies its row of the table of
// status writers, all of it and nothing else.
func TestWriteStatusKeepsToItsRow(t *testing.T) {
	c, applied := statusapplytest.Client(t)
	if err := WriteStatus(t.Context(), c, statusapplytest.Machine()); err != nil {
		t.Fatal(err)
	}
	applied.CheckOwned(t, true)
}
