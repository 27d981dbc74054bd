package configpatch

import (
	"testing"

	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
)

// TestWriteStatusKeepsToItsRow: the config patch reconciler applies its
// row of the table of status writers, all of it and nothing else.
func TestWriteStatusKeepsToItsRow(t *testing.T) {
	c, applied := statusapplytest.Client(t)
	if err := writeStatus(t.Context(), c, statusapplytest.Patch()); err != nil {
		t.Fatal(err)
	}
	applied.CheckOwned(t, true)
}
