package bundlestore

import (
	"testing"

	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
)

// TestRecordDigestKeepsToItsRow: the digest is applied alone, under its
// row of the table of status writers.
func TestRecordDigestKeepsToItsRow(t *testing.T) {
	c, applied := statusapplytest.Client(t)
	if err := RecordDigest(t.Context(), c, statusapplytest.Cluster(), "another digest"); err != nil {
		t.Fatal(err)
	}
	applied.CheckOwned(t, true)
}
