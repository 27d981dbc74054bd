package configstatus

import (
	"testing"

	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
)

// TestWriteStatusKeepsToItsRow: the config reconciler applies its row of
// the table of status writers, all of it and nothing else, for a machine
// with a config and for one without (which leaves intake's conditions).
func TestWriteStatusKeepsToItsRow(t *testing.T) {
	for _, configured := range []bool{true, false} {
		c, applied := statusapplytest.Client(t)
		m := statusapplytest.Machine()
		if !configured {
			m.Status.AppliedConfig = nil
		}
		if err := WriteStatus(t.Context(), c, m); err != nil {
			t.Fatal(err)
		}
		applied.CheckOwned(t, configured)
	}
}
