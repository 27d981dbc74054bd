// Package ha tests Ichor on the HA shape (two ichor-apiservers on a three-member etcd, two controllers), each fault under a short load.
package ha

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.HA) }
