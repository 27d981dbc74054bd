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

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	cp, err = harness.Start(ctx, harness.Options{Logf: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "harness: "+format+"\n", args...)
	}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer cp.Stop()
	return m.Run()
}
