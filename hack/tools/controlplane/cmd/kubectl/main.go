// Command kubectl is the upstream Kubernetes CLI, built from k8s.io/kubectl
// at the version that matches the pinned k8s.io/kubernetes.
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // client auth plugins (exec, oidc)
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// Set klog verbosity from -v before the command is built, so that
	// plugin and kuberc handling during construction honour it.
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
