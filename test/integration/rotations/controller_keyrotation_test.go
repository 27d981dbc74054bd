package rotations

import (
	"testing"
	"time"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/integration/itest"
)

// TestControllerRotatesDiskKeys: a 3+2 cluster whose disks are sealed to
// each node's TPM has its disk-encryption key rotated, as Talos can: every
// node reboots twice, one at a time, first enrolling a new key slot beside
// the old one, then dropping the old one. An operator may not start it;
// keys Talos cannot rotate are refused at create, naming the one it can;
// a dry run touches nothing; talosctl reads the result from a node.
func TestControllerRotatesDiskKeys(t *testing.T) {
	d := itest.NewDemoClusterWith(t, itest.DemoSetup{DiskEncryption: v1alpha1.DiskEncryptionKeyTPM, Tune: func(o *ctrlcmd.Options) {
		o.OperationPollInterval = 250 * time.Millisecond
		o.OperationStepTimeout = itest.OperationStepTimeout
	}})
	t.Run("three control planes and two workers become Ready", d.BecomesReady)
	t.Run("an admin rotates the disk-encryption key, two reboots of each node one at a time", d.DiskKeyRotation)
}
