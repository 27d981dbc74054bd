// Package backups tests backups of a cluster to S3 and to a volume, on a schedule and to a retention, and restores of etcd from them.
package backups

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.Single) }
