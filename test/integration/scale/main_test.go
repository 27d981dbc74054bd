// Package scale tests ichor-controller's behaviour at scale, and holds the benchmarks of whole clusters.
package scale

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.Single) }
