// Package cluster tests ichor-controller building a cluster of simulated Talos nodes from kubectl apply to Ready, then patching it and deleting and adding machines.
package cluster

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.Single) }
