// Package operations tests the day-2 operations ichor-controller runs on a simulated cluster: reboots, Talos and Kubernetes upgrades, etcd defragmentation, their refusals and faults.
package operations

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.Single) }
