// Command ichor-controller runs Ichor's controller manager.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/cmd/controller"
)

func main() {
	cmd := controller.NewCommand()
	if err := cmd.ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}
