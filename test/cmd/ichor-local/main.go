// Command ichor-local runs the whole local management plane in the
// foreground for `make run`: etcd, kube-apiserver, kube-controller-manager
// and ichor-apiserver (with its embedded etcd) registered through its
// APIService. Once ichor.dev is Available it writes an admin kubeconfig and
// says how to use it; Ctrl-C or SIGTERM stops everything it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"ichor.dev/ichor/test/harness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "ichor-local: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	stateDir := flag.String("state-dir", ".local/run", "Directory for certificates, data and logs; emptied at every start.")
	kubeconfig := flag.String("kubeconfig", ".local/kubeconfig", "Where to write the admin kubeconfig.")
	apiserver := flag.String("ichor-apiserver", "bin/ichor-apiserver", "The ichor-apiserver binary to run.")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := filepath.Abs(*stateDir)
	if err != nil {
		return err
	}
	// A fresh control plane every time, so a second run never trips on the first's leftovers.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	binary, err := filepath.Abs(*apiserver)
	if err != nil {
		return err
	}

	cp, err := harness.Start(ctx, harness.Options{
		Dir:               dir,
		IchorBinary:       binary,
		IchorEmbeddedEtcd: true,
		Logf:              func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	})
	if err != nil {
		return err
	}
	defer cp.Stop()

	data, err := os.ReadFile(cp.AdminKubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*kubeconfig, data, 0o600); err != nil {
		return err
	}
	fmt.Printf(`
Ichor is running: ichor.dev/v1alpha1 is Available through kube-apiserver at %s.
Logs are in %s.

  kubectl --kubeconfig %s get ichor -A
  kubectl --kubeconfig %s api-resources --api-group=ichor.dev

Press Ctrl-C to stop.
`, cp.URL, dir, *kubeconfig, *kubeconfig)
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "stopping")
	return nil
}
