// Package resets tests what takes a node away for good or for a while: shutdowns and power-on, node resets in Talos's wipe modes, and reclaims into another cluster.
package resets

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.Single) }
