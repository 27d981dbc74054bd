package harness

import "ichor.dev/ichor/test/internal/proc"

// BinDirEnv names the environment variable that points at the control-plane
// binaries; `make test` and `make run` set it from hack/build-controlplane.sh.
const BinDirEnv = proc.BinDirEnv

// BinDir returns the directory holding kube-apiserver, kube-controller-manager,
// kubectl and etcd, building them with hack/build-controlplane.sh when
// ICHOR_CONTROLPLANE_BIN is unset.
func BinDir() (string, error) { return proc.BinDir() }

// RepoRoot is the directory holding the module's go.mod.
func RepoRoot() (string, error) { return proc.RepoRoot() }
