package harness

import (
	"fmt"
	"os/exec"
	"path/filepath"

	"ichor.dev/ichor/test/internal/proc"
)

// BinDirEnv names the environment variable that points at the control-plane
// binaries; `make test` and `make run` set it from hack/build-controlplane.sh.
const BinDirEnv = proc.BinDirEnv

// BinDir returns the directory holding kube-apiserver, kube-controller-manager,
// kubectl and etcd, building them with hack/build-controlplane.sh when
// ICHOR_CONTROLPLANE_BIN is unset.
func BinDir() (string, error) { return proc.BinDir() }

// RepoRoot is the directory holding the module's go.mod.
func RepoRoot() (string, error) { return proc.RepoRoot() }

// BuildIchorAPIServer builds the ichor-apiserver binary from this checkout
// into dir and returns its path, for tests that run it as the Deployment does.
func BuildIchorAPIServer(dir string) (string, error) { return BuildBinary(dir, "ichor-apiserver") }

// BuildBinary builds ./cmd/<name> from this checkout into dir and returns
// its path, for tests that run a component as its Deployment does.
func BuildBinary(dir, name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	binary := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-o", binary, "./cmd/"+name)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", name, err, out)
	}
	return binary, nil
}
