// Command talosctl is the official Talos CLI, built from the Talos module
// v1.14.1 pinned in this tools module's go.mod (see hack/build-talosctl.sh). It
// mirrors the upstream cmd/talosctl/main.go.
package main

import (
	"os"

	_ "github.com/siderolabs/talos/cmd/talosctl/acompat"
	"github.com/siderolabs/talos/cmd/talosctl/cmd"
)

func main() {
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}
