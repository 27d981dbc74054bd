package backups

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestControllerBacksUpAndRestores: a Ready 3+2 cluster is backed up,
// encrypted, to an S3 server and to a volume, now and on a schedule, pruned
// to a retention; an admin restores etcd from a backup, and from a snapshot
// uploaded from elsewhere, into the running cluster.
func TestControllerBacksUpAndRestores(t *testing.T) {
	d := itest.NewOperationsCluster(t)
	t.Run("three control planes and two workers become Ready", d.BecomesReady)
	t.Run("backups go encrypted to an S3 server, on a schedule, to a retention", d.Backups)
}
