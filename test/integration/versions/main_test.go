// Package versions tests clusters of each Talos release Ichor manages, and upgrades between them.
package versions

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.Single) }
