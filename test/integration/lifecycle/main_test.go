// Package lifecycle tests ichor-controller taking machines in, and what it survives and refuses on the way: crashes between a node call and its status write, planted secrets, Secure Boot, downgrades, its metrics' access.
package lifecycle

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.Single) }
