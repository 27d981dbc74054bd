// Command ichor-bench starts a control plane with the ichor-apiserver binary,
// measures ichor.dev/v1alpha1 against the same schema served as CRDs, prints
// one table and stores it as JSON. `make bench` runs it at full size.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/test/bench"
	"ichor.dev/ichor/test/harness"
)

func main() {
	cfg := bench.DefaultConfig()
	cfg.AddFlags(flag.CommandLine)
	binary := flag.String("ichor-apiserver", "bin/ichor-apiserver", "ichor-apiserver binary to measure")
	out := flag.String("out", ".local/bench", "directory for the JSON report, relative to the repository root")
	var ichorArgs stringList
	flag.Var(&ichorArgs, "ichor-arg", "extra ichor-apiserver flag, to measure a setting (repeatable), e.g. -ichor-arg=--http2-max-streams-per-connection=1000")
	flag.Parse()
	if err := run(cfg, *binary, ichorArgs, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ichor-bench:", err)
		os.Exit(1)
	}
}

func run(cfg bench.Config, binary string, ichorArgs []string, out string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctrllog.SetLogger(logr.Discard())
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "ichor-bench: "+format+"\n", args...) }

	root, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(binary) {
		binary = filepath.Join(root, binary)
	}
	cp, err := harness.Start(ctx, harness.Options{IchorBinary: binary, IchorArgs: ichorArgs, Logf: logf})
	if err != nil {
		return fmt.Errorf("start control plane: %w", err)
	}
	defer cp.Stop()

	report, err := bench.Run(ctx, cp, cfg, logf)
	if err != nil {
		return err
	}
	report.IchorArgs = ichorArgs
	if err := report.WriteTable(os.Stdout); err != nil {
		return err
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(root, out)
	}
	path, err := report.WriteJSON(out)
	if err != nil {
		return err
	}
	logf("%d metrics in %s; wrote %s", len(report.Rows), report.Duration, path)
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
