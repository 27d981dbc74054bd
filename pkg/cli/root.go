// Package cli is the ichor command: Ichor's actions (approve, start,
// override, reclaim, password, download, wait) as commands instead of raw
// subresource URLs, with kubectl's kubeconfig handling and flags.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// Main runs the command line args (os.Args) and returns the exit code.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	cmd := NewCommand(filepath.Base(args[0]), streams)
	cmd.SetArgs(args[1:])
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(streams.ErrOut, "error: "+Explain(err))
		var exit *exitError
		if errors.As(err, &exit) {
			return exit.code
		}
		return 1
	}
	return 0
}

// exitError ends the command with code after its message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// Options are what every command shares: where the API is and who asks,
// as kubectl takes them, and the streams.
type Options struct {
	Config *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
}

// rest is the client configuration the flags and kubeconfig give.
func (o *Options) rest() (*rest.Config, error) {
	cfg, err := o.Config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	if cfg.Insecure {
		return nil, errors.New("the kubeconfig turns TLS verification off (insecure-skip-tls-verify): ichor talks to a server it has verified only; give the cluster's certificate-authority instead")
	}
	cfg.UserAgent = "ichor/" + rest.DefaultKubernetesUserAgent()
	return cfg, nil
}

// client is the ichor.dev client.
func (o *Options) client() (versioned.Interface, error) {
	cfg, err := o.rest()
	if err != nil {
		return nil, err
	}
	return versioned.NewForConfig(cfg)
}

// namespace is -n, or the kubeconfig context's namespace.
func (o *Options) namespace() (string, error) {
	ns, _, err := o.Config.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// NewCommand is the ichor command; name is how it was run: "kubectl-ichor"
// shows its usage as "kubectl ichor".
func NewCommand(name string, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{Config: genericclioptions.NewConfigFlags(true), IOStreams: streams}
	o.Config.Insecure = nil // no --insecure-skip-tls-verify
	root := &cobra.Command{
		Use:   "ichor",
		Short: "Drive Ichor, the Kubernetes-native management plane for Talos Linux clusters",
		Long: `ichor drives Ichor's actions on its ichor.dev API: approving machines, starting operations,
overriding a safety check, reclaiming a machine, setting a password, downloading what a node
holds, and waiting for an operation. It uses your kubeconfig and kubectl's flags; every request
is made as you, so RBAC and the audit log name you.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if strings.HasPrefix(name, "kubectl-") {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl ichor"}
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.Config.AddFlags(root.PersistentFlags())
	root.AddGroup(&cobra.Group{ID: "machines", Title: "Machines:"}, &cobra.Group{ID: "operations", Title: "Operations:"},
		&cobra.Group{ID: "access", Title: "Access:"})
	for _, c := range []*cobra.Command{
		newApprove(o, true), newApprove(o, false), newReclaim(o),
		newStart(o), newWait(o), newOverride(o), newStatus(o),
		newDownload(o), newUpload(o), newPassword(o), newInit(o), newBreakGlass(o),
		newSchematic(o), newImageURLs(o),
		newLogin(o), newLogout(o), newAuth(o), newKubeconfig(o),
	} {
		root.AddCommand(c)
	}
	return root
}

// isTerminal reports whether the stream s is a terminal.
func isTerminal(s any) bool {
	f, ok := s.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
