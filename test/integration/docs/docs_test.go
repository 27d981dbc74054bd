// Package docs runs the documentation's command blocks against `make run`,
// as a reader would: the local management plane (test/cmd/ichor-local)
// started as `make run` starts it, then each block marked for it, in the
// order of the pages, in a directory laid out as the repository's
// (.local/kubeconfig, bin/ichor), with the PATH and KUBECONFIG the
// getting-started guide exports.
//
// The line before each sh block's fence says what the test does with it:
//
//	<!-- test: run -->            every command must succeed
//	<!-- test: watch -->          each line runs for at most ten seconds (a
//	                              watch is stopped then), and must not fail
//	<!-- test: skip (why) -->     it cannot run against `make run` (it names
//	                              your own cluster, registry or files)
//
// A block of these pages without a mark fails the test: each new block is
// run or knowingly left out.
package docs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"ichor.dev/ichor/test/harness"
)

// pages are the documents whose marked blocks run, in order: a later page
// goes on from the state an earlier one left.
var pages = []string{"README.md", "docs/getting-started.md"}

// block is one fenced command block of a page.
type block struct {
	page, mark, text string
	line             int
}

// blocks are the sh blocks of the page at path, with their marks.
func blocks(root, page string) ([]block, error) {
	data, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		return nil, err
	}
	var out []block
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if trimmed != "```sh" {
			continue
		}
		indent := lines[i][:strings.Index(lines[i], "```")]
		mark := ""
		if i > 0 {
			prev := strings.TrimSpace(lines[i-1])
			if m, ok := strings.CutPrefix(prev, "<!-- test:"); ok {
				mark = strings.TrimSpace(strings.TrimSuffix(m, "-->"))
			}
		}
		b := block{page: page, mark: mark, line: i + 1}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		b.text = strings.Join(body, "\n") + "\n"
		out = append(out, b)
	}
	return out, nil
}

// TestDocsCommandBlocksRunAgainstMakeRun starts what `make run` starts and
// runs every marked block of pages, in order.
func TestDocsCommandBlocksRunAgainstMakeRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var runnable []block
	for _, page := range pages {
		bs, err := blocks(root, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			switch {
			case b.mark == "run" || b.mark == "watch":
				runnable = append(runnable, b)
			case strings.HasPrefix(b.mark, "skip (") && strings.HasSuffix(b.mark, ")"):
			default:
				t.Errorf("%s:%d: mark the block <!-- test: run -->, <!-- test: watch --> or <!-- test: skip (why) -->, not %q", b.page, b.line, b.mark)
			}
		}
	}
	if t.Failed() || len(runnable) == 0 {
		t.Fatal("no block to run, or a block unmarked")
	}

	// The repository's layout: bin/ with make build's binaries, .local/.
	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+"/", "./cmd/ichor-apiserver", "./cmd/ichor-controller", "./cmd/ichor-auth",
		"./cmd/ichor-ui", "./cmd/ichor", "./test/cmd/ichor-local")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	controlPlane, err := harness.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(work, ".local")
	run := exec.CommandContext(ctx, filepath.Join(bin, "ichor-local"), "-state-dir", filepath.Join(local, "run"),
		"-kubeconfig", filepath.Join(local, "kubeconfig"), "-ichor-apiserver", filepath.Join(bin, "ichor-apiserver"),
		"-ichor-controller", filepath.Join(bin, "ichor-controller"), "-ichor-auth", filepath.Join(bin, "ichor-auth"),
		"-ichor-ui", filepath.Join(bin, "ichor-ui"))
	run.Dir = root // it finds artifacts/ there; what it writes goes to work/.local
	run.Cancel = func() error { return run.Process.Signal(os.Interrupt) }
	run.WaitDelay = time.Minute
	stdout, err := run.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(os.TempDir(), "ichor-docs-test-make-run.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() //nolint:errcheck
	run.Stderr = logFile
	stderrTail := func() string {
		data, _ := os.ReadFile(logPath)
		return tail(string(data))
	}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	defer func() {
		// As Ctrl-C stops make run; it must stop everything it started.
		_ = run.Process.Signal(os.Interrupt)
		select {
		case <-stopped:
		case <-time.After(2 * time.Minute):
			_ = run.Process.Signal(syscall.SIGQUIT)
			t.Errorf("make run did not stop within two minutes of Ctrl-C; its goroutines are in %s", logPath)
			<-stopped
		}
	}()
	ready := make(chan string, 1)
	go func() {
		var printed strings.Builder
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			printed.WriteString(s.Text() + "\n")
			if strings.HasPrefix(s.Text(), "Press Ctrl-C to stop.") {
				ready <- printed.String()
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		stopped <- run.Wait()
	}()
	select {
	case printed := <-ready:
		t.Logf("make run:\n%s", printed)
	case err := <-stopped:
		stopped <- err
		t.Fatalf("ichor-local ended before it was ready: %v\n%s", err, stderrTail())
	case <-ctx.Done():
		t.Fatalf("ichor-local not ready: %v\n%s", ctx.Err(), stderrTail())
	}

	env := append(os.Environ(),
		"KUBECONFIG="+filepath.Join(local, "kubeconfig"),
		"PATH="+bin+":"+controlPlane+":"+os.Getenv("PATH"),
		"HOME="+filepath.Join(work, "home"),
		"KUBECACHEDIR="+filepath.Join(work, "kubectl-cache"))
	for _, b := range runnable {
		began := time.Now()
		if err := runBlock(ctx, work, env, b); err != nil {
			t.Fatalf("%s:%d (%s): %v\n%s", b.page, b.line, b.mark, err, b.text)
		}
		t.Logf("%s:%d ran in %s", b.page, b.line, time.Since(began).Round(100*time.Millisecond))
	}
}

// runBlock runs a block in dir as bash runs a pasted script, stopping at the
// first failure.
func runBlock(ctx context.Context, dir string, env []string, b block) error {
	if b.mark == "run" {
		return bash(ctx, dir, env, b.text, 10*time.Minute)
	}
	for _, line := range strings.Split(b.text, "\n") {
		cmd, _, _ := strings.Cut(line, "  #")
		if strings.TrimSpace(cmd) == "" || strings.HasPrefix(strings.TrimSpace(cmd), "#") {
			continue
		}
		err := bash(ctx, dir, env, cmd, 10*time.Second)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
	return nil
}

// bash runs script with bash -euo pipefail, within limit: an error that
// wraps context.DeadlineExceeded when it was still running then.
func bash(ctx context.Context, dir string, env []string, script string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("%w after %s:\n%s", ctx.Err(), limit, out)
	}
	if err != nil {
		return fmt.Errorf("%w:\n%s", err, out)
	}
	return nil
}

func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}
