// Package itest is what Ichor's integration tests share: the control plane
// a test package starts (Main), the users, clients and objects the tests
// make, the simulated Talos clusters they build, and the checks they repeat.
// The tests live in one package per area under test/integration, so that
// go test runs the areas side by side, each on a control plane of its own.
package itest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"ichor.dev/ichor/test/harness"
)

// CP is the control plane of the test package running; each test works in
// a namespace of its own.
var CP *harness.ControlPlane

// PackageDir is a directory the test package's tests share, removed when
// they end.
var PackageDir string

// ScratchDir is the scratch directory of the controllers a test package
// runs (ichor-controller's --scratch-dir): one per package, so that a
// controller started again finds what the one before it kept there, and no
// other package's controller sweeps it.
var ScratchDir string

// Shape is the shape of the control plane a test package runs on.
type Shape int

const (
	// Single runs one ichor-apiserver in the test process, on the control
	// plane's etcd.
	Single Shape = iota
	// HA runs ichor-apiserver as artifacts/ha does: two replicas of the
	// binary behind one Service, on an etcd cluster of three members of
	// their own.
	HA
	// Bare runs no Ichor at all: etcd, kube-apiserver,
	// kube-controller-manager and kube-scheduler (harness.Options.Workloads),
	// for tests that install Ichor themselves and may add a node.
	Bare
)

// Main starts a control plane of shape, runs the package's tests on it,
// stops it and exits: a test package's TestMain.
func Main(m *testing.M, shape Shape) {
	os.Exit(run(m, shape))
}

func run(m *testing.M, shape Shape) int {
	ctx := context.Background()
	var err error
	if PackageDir, err = os.MkdirTemp("", "ichor-package-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(PackageDir) //nolint:errcheck
	ScratchDir = filepath.Join(PackageDir, "scratch")
	opts := harness.Options{Logf: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "harness: "+format+"\n", args...)
	}}
	if shape == HA {
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
	}
	opts.NoIchor = shape == Bare
	opts.Workloads = shape == Bare
	CP, err = harness.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer CP.Stop()
	// The ichor CLI a package's tests built (IchorBin) goes with them.
	defer func() {
		if IchorBinDir != "" {
			_ = os.RemoveAll(IchorBinDir)
		}
	}()
	return m.Run()
}
