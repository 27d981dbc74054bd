package itest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ichor.dev/ichor/test/harness"
)

// These tests drive ichor.dev through kubectl the way people do: discovery,
// explain, tables, server-side apply, watch, auth can-i and dry runs, all
// through kube-apiserver's aggregator.

// KubectlTimeout bounds one test's kubectl runs.
const KubectlTimeout = 2 * time.Minute

// KubectlCmd is the kubectl built with the control plane, as the admin, with
// a discovery cache of its own.
func KubectlCmd(ctx context.Context, t testing.TB, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(CP.BinDir, "kubectl"), append([]string{"--kubeconfig=" + CP.AdminKubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+t.TempDir())
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// RunKubectl is cp.Kubectl that also returns what kubectl printed on stderr
// when it succeeds (warnings).
func RunKubectl(ctx context.Context, t testing.TB, stdin []byte, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := KubectlCmd(ctx, t, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return out.String(), errOut.String(), &harness.KubectlError{Args: args, Err: err, Stderr: errOut.String()}
	}
	return out.String(), errOut.String(), nil
}

// MustKubectl runs kubectl as the admin and fails the test if it fails.
func MustKubectl(ctx context.Context, t testing.TB, args ...string) string {
	t.Helper()
	out, err := CP.Kubectl(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// MustApply server-side applies YAML from stdin.
func MustApply(ctx context.Context, t testing.TB, manifest string) string {
	t.Helper()
	out, err := CP.KubectlWithInput(ctx, []byte(manifest), "apply", "--server-side", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// KubectlTable is kubectl's human-readable output cut into cells at the
// header's column offsets, so an empty cell stays empty.
type KubectlTable struct {
	Header []string
	Rows   []map[string]string
}

func ParseTable(t testing.TB, out string) KubectlTable {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) == "" {
		t.Fatalf("no table in kubectl output:\n%s", out)
	}
	head := lines[0]
	var starts []int
	for i := range len(head) {
		if head[i] != ' ' && (i == 0 || head[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	cell := func(line string, i int) string {
		end := len(line)
		if i+1 < len(starts) {
			end = min(end, starts[i+1])
		}
		if starts[i] >= end {
			return ""
		}
		return strings.TrimSpace(line[starts[i]:end])
	}
	var tbl KubectlTable
	for i := range starts {
		tbl.Header = append(tbl.Header, cell(head, i))
	}
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, col := range tbl.Header {
			row[col] = cell(line, i)
		}
		tbl.Rows = append(tbl.Rows, row)
	}
	return tbl
}

func (tbl KubectlTable) Row(t testing.TB, name string) map[string]string {
	t.Helper()
	for _, r := range tbl.Rows {
		if r["NAME"] == name {
			return r
		}
	}
	t.Fatalf("no row NAME=%s in %v", name, tbl.Rows)
	return nil
}

// A cluster, two machines (one assigned and reporting status, one spare), a
// patch and an operation, as a user would write them.
const ClusterManifest = `
apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: prod}
spec:
  talosVersion: v1.13.0
  kubernetesVersion: v1.36.0
  controlPlane: {endpoint: "https://10.5.0.2:6443"}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: cp-1}
spec:
  clusterName: prod
  role: controlplane
  address: 10.5.0.2
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: spare}
spec:
  address: "10.5.0.9:50001"
---
apiVersion: ichor.dev/v1alpha1
kind: TalosConfigPatch
metadata: {name: wipe}
spec:
  clusterName: prod
  patch: |
    machine:
      install:
        wipe: true
---
apiVersion: ichor.dev/v1alpha1
kind: TalosOperation
metadata: {name: reboot-1}
spec:
  clusterName: prod
  type: reboot
`

const Fingerprint = "n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg="

// SetupCluster creates clusterManifest in ns and writes cp-1's status as the
// controller would.
func SetupCluster(ctx context.Context, t testing.TB, ns string) {
	t.Helper()
	if _, err := CP.KubectlWithInput(ctx, []byte(ClusterManifest), "apply", "--server-side", "-n", ns, "-f", "-"); err != nil {
		t.Fatal(err)
	}
	// cp-1 holds its address once pinned: it goes with the test, before
	// its namespace does in the background, so the next test may hold it.
	t.Cleanup(func() {
		_, _ = CP.Kubectl(context.Background(), "delete", "talosmachines", "--all", "-n", ns, "--wait=true", "--timeout=30s")
	})
	MustKubectl(ctx, t, "patch", "talosmachine", "cp-1", "-n", ns, "--subresource=status", "--type=merge", "-p",
		`{"status":{"phase":"Ready","talosVersion":"v1.13.0","nodeName":"node-a","maintenance":{"certificateFingerprint":"`+Fingerprint+`","seenAt":"2026-01-01T00:00:00Z"}}}`)
}

// WatchLines starts kubectl with args in the background and returns its
// stdout line by line; stop ends it and returns its stderr.
func WatchLines(ctx context.Context, t *testing.T, args ...string) (lines <-chan string, stop func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	cmd := KubectlCmd(ctx, t, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 64)
	scanDone := make(chan struct{})
	go func() {
		defer close(ch)
		defer close(scanDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case ch <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	stopped := false
	stop = func() string {
		if !stopped {
			stopped = true
			cancel()
			<-scanDone
			_ = cmd.Wait()
		}
		return stderr.String()
	}
	t.Cleanup(func() { stop() })
	return ch, stop
}

// AwaitLine returns the first line for which match is true, failing the test
// when the output ends or the deadline passes first.
func AwaitLine(t *testing.T, lines <-chan string, stop func() string, what string, match func(fields []string) bool) string {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	var seen []string
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl watch ended before %s; printed %q; stderr:\n%s", what, seen, stop())
			}
			seen = append(seen, line)
			if match(strings.Fields(line)) {
				return line
			}
		case <-timeout.C:
			t.Fatalf("no %s from kubectl watch in 30s; printed %q; stderr:\n%s", what, seen, stop())
		}
	}
}

// CanI runs kubectl auth can-i and returns its answer; kubectl exits 1 for "no".
func CanI(ctx context.Context, t *testing.T, args ...string) bool {
	t.Helper()
	out, err := CP.Kubectl(ctx, append([]string{"auth", "can-i"}, args...)...)
	answer := strings.TrimSpace(out)
	if err == nil {
		if answer != "yes" {
			t.Fatalf("kubectl auth can-i %v exited 0 with %q", args, out)
		}
		return true
	}
	var kerr *harness.KubectlError
	var exit *exec.ExitError
	if errors.As(err, &kerr) && errors.As(kerr.Err, &exit) && exit.ExitCode() == 1 && answer == "no" {
		return false
	}
	t.Fatalf("kubectl auth can-i %v: %v (stdout %q)", args, err, out)
	return false
}
