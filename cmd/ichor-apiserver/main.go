// Command ichor-apiserver serves the ichor.dev API.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"ichor.dev/ichor/pkg/cmd/apiserver"
)

func main() {
	cmd := apiserver.NewCommand()
	cmd.SetContext(genericapiserver.SetupSignalContext())
	os.Exit(cli.Run(cmd))
}
