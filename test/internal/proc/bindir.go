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

// TalosctlBinDirEnv names the environment variable that points at the directory holding talosctl; `make
// test` sets it from hack/build-talosctl.sh.
const TalosctlBinDirEnv = "ICHOR_TALOSCTL_BIN"

// SeaweedFSBinDirEnv names the environment variable that points at the directory holding SeaweedFS's weed;
// `make test` sets it from hack/build-seaweedfs.sh.
const SeaweedFSBinDirEnv = "ICHOR_SEAWEEDFS_BIN"

// ChromiumEnv names the environment variable that holds the path of the Chromium the console's browser
// tests drive; `make test` sets it from hack/install-chromium.sh.
const ChromiumEnv = "ICHOR_CHROMIUM"

// BinDir returns the directory holding kube-apiserver, kube-controller-manager, kubectl and etcd,
// building them with hack/build-controlplane.sh when ICHOR_CONTROLPLANE_BIN is unset.
var BinDir = toolDir(BinDirEnv, "build-controlplane.sh")

// TalosctlBinDir returns the directory holding talosctl, building it with hack/build-talosctl.sh when
// ICHOR_TALOSCTL_BIN is unset.
var TalosctlBinDir = toolDir(TalosctlBinDirEnv, "build-talosctl.sh")

// TalosctlOf names the official talosctl of a Talos version in TalosctlBinDir, as
// hack/build-talosctl.sh builds them: talosctl is v1.13.0, talosctl-v1.14.1 is v1.14.1.
func TalosctlOf(version string) string {
	if strings.HasPrefix(version, "v1.14.") {
		return "talosctl-v1.14.1"
	}
	return "talosctl"
}

// SeaweedFSBinDir returns the directory holding weed, building it with hack/build-seaweedfs.sh when
// ICHOR_SEAWEEDFS_BIN is unset.
var SeaweedFSBinDir = toolDir(SeaweedFSBinDirEnv, "build-seaweedfs.sh")

// Chromium returns the path of Debian's Chromium, installing it with hack/install-chromium.sh when
// ICHOR_CHROMIUM is unset.
var Chromium = toolDir(ChromiumEnv, "install-chromium.sh")

// toolDir returns a function that finds a directory of built tools once per process: the directory env
// names, or else what hack/<script> prints on stdout after building (or reusing) them.
func toolDir(env, script string) func() (string, error) {
	return sync.OnceValues(func() (string, error) {
		if dir := os.Getenv(env); dir != "" {
			return dir, nil
		}

		root, err := RepoRoot()
		if err != nil {
			return "", err
		}

		var stdout, stderr bytes.Buffer

		cmd := exec.Command("bash", filepath.Join(root, "hack", script))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr

		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("hack/%s: %w\n%s", script, err, Tail(stderr.String(), 40))
		}

		return strings.TrimSpace(stdout.String()), nil
	})
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
