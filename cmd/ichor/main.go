// Command ichor is Ichor's command line, also a kubectl plugin: installed
// as kubectl-ichor on the PATH, `kubectl ichor …` runs it. It reads the
// kubeconfig and takes kubectl's flags.
package main

import (
	"os"

	"ichor.dev/ichor/pkg/cli"
)

func main() {
	os.Exit(cli.Main(os.Args))
}
