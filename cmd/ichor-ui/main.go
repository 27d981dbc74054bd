// Command ichor-ui serves Ichor's web console.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/cmd/ui"
)

func main() {
	if err := ui.NewCommand().ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}
