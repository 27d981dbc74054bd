package proc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// BinDirEnv names the environment variable that points at the control-plane binaries; `make test` and
// `make run` set it from hack/build-controlplane.sh.
const BinDirEnv = "ICHOR_CONTROLPLANE_BIN"

var (
	binDirOnce sync.Once
	binDir     string
	binDirErr  error
)

// BinDir returns the directory holding kube-apiserver, kube-controller-manager, kubectl and etcd,
// building them with hack/build-controlplane.sh when ICHOR_CONTROLPLANE_BIN is unset.
func BinDir() (string, error) {
	binDirOnce.Do(func() {
		if dir := os.Getenv(BinDirEnv); dir != "" {
			binDir = dir

			return
		}

		root, err := RepoRoot()
		if err != nil {
			binDirErr = err

			return
		}

		var stdout, stderr bytes.Buffer

		cmd := exec.Command("bash", filepath.Join(root, "hack", "build-controlplane.sh"))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr

		if err := cmd.Run(); err != nil {
			binDirErr = fmt.Errorf("hack/build-controlplane.sh: %w\n%s", err, Tail(stderr.String(), 40))

			return
		}

		binDir = strings.TrimSpace(stdout.String())
	})

	return binDir, binDirErr
}

// RepoRoot is the directory holding the module's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}

	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(data, []byte("module ichor.dev/ichor\n")) {
			return dir, nil
		}

		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no ichor.dev/ichor go.mod above the working directory")
		}

		dir = parent
	}
}
