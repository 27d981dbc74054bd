// Package trust tests what a Ready cluster comes to trust (an OpenID provider, kubelet serving certificates checked over Talos) and what Ichor hands out of it: least-role Talos credentials and streamed downloads.
package trust

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.Single) }
