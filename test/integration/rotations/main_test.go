// Package rotations tests the rotations of a cluster's root of trust: its Talos and Kubernetes CAs, and its disks' encryption keys.
package rotations

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.Single) }
