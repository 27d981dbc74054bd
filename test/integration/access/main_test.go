// Package access tests how people reach Ichor: sign-in at ichor-auth and an OpenID provider, the ichor CLI, and the console in a real browser.
package access

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.Single) }
