// Command helm is the official Helm CLI, built from the Helm module v4.3.2
// pinned in this tools module's go.mod (see hack/build-helm.sh). It mirrors
// the upstream cmd/helm/helm.go.
package main

import (
	"errors"
	"log/slog"
	"os"

	// Client auth plugins, as upstream links them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	helmcmd "helm.sh/helm/v4/pkg/cmd"
	"helm.sh/helm/v4/pkg/kube"
)

func main() {
	// Upstream names the field manager "helm" whatever the binary is called.
	kube.ManagedFieldsManager = "helm"

	cmd, err := helmcmd.NewRootCmd(os.Stdout, os.Args[1:], helmcmd.SetupLogging)
	if err != nil {
		slog.Warn("command failed", slog.Any("error", err))
		os.Exit(1)
	}
	if err := cmd.Execute(); err != nil {
		if cerr, ok := errors.AsType[helmcmd.CommandError](err); ok {
			os.Exit(cerr.ExitCode)
		}
		os.Exit(1)
	}
}
