// Command ichor-auth runs Ichor's token issuer for IchorUsers.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/cmd/auth"
)

func main() {
	if err := auth.NewCommand().ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}
