// Package integration tests Ichor through a real kube-apiserver: every
// request goes through the aggregator to ichor-apiserver, as a user's would.
package integration

import (
	"context"
	"fmt"
	"os"
	"testing"

	"ichor.dev/ichor/test/harness"
)

// cp is the control plane every test in this package shares; each test
// works in a namespace of its own.
var cp *harness.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// shapeEnv selects the control plane's shape: "ha" runs ichor-apiserver
// as artifacts/ha does, two replicas of the binary behind one Service on an
// etcd cluster of three members of their own, for the HA tests (make
// test-ha); unset, one ichor-apiserver runs in this process.
const shapeEnv = "ICHOR_TEST_SHAPE"

func run(m *testing.M) int {
	ctx := context.Background()
	opts := harness.Options{Logf: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "harness: "+format+"\n", args...)
	}}
	switch shape := os.Getenv(shapeEnv); shape {
	case "":
	case "ha":
		dir, err := os.MkdirTemp("", "ichor-ha-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir) //nolint:errcheck
		if opts.IchorBinary, err = harness.BuildBinary(dir, "ichor-apiserver"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		opts.HA = true
	default:
		fmt.Fprintf(os.Stderr, "%s=%s: the shapes are ha and none\n", shapeEnv, shape)
		return 1
	}
	var err error
	cp, err = harness.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer cp.Stop()
	return m.Run()
}
