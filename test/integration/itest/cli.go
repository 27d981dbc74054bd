package itest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client/config"
	corev1 "k8s.io/api/core/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/talossim"
)

// The ichor command, built as a user installs it (and as kubectl-ichor,
// the kubectl plugin), run against the harness as the people of each role
// with kubectl's impersonation flags.

var (
	IchorBinOnce sync.Once
	IchorBinDir  string
	IchorBinErr  error
)

// IchorBin builds cmd/ichor once into a directory that also holds it as
// kubectl-ichor and kubectl, for PATH.
func IchorBin(t *testing.T) string {
	t.Helper()
	IchorBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ichor-cli-")
		if err != nil {
			IchorBinErr = err
			return
		}
		IchorBinDir = dir
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "ichor"), "ichor.dev/ichor/cmd/ichor").CombinedOutput()
		if err != nil {
			IchorBinErr = err
			t.Logf("go build: %s", out)
			return
		}
		for link, target := range map[string]string{"kubectl-ichor": filepath.Join(dir, "ichor"), "kubectl": filepath.Join(CP.BinDir, "kubectl")} {
			if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
				IchorBinErr = err
				return
			}
		}
	})
	if IchorBinErr != nil {
		t.Fatalf("building cmd/ichor: %v", IchorBinErr)
	}
	return IchorBinDir
}

type CLIResult struct {
	Stdout, Stderr string
	Code           int
}

// RunIchor runs `ichor args…` (or `kubectl ichor args…` when args[0] is
// "kubectl") as user in groups, with env added.
func RunIchor(ctx context.Context, t *testing.T, env []string, user, group string, args ...string) CLIResult {
	t.Helper()
	dir := IchorBin(t)
	name := filepath.Join(dir, "ichor")
	all := append([]string{"--kubeconfig=" + CP.AdminKubeconfig}, args...)
	if len(args) > 0 && args[0] == "kubectl" {
		// kubectl takes no flag before a plugin's name.
		name, all = filepath.Join(dir, "kubectl"), append([]string{"ichor", "--kubeconfig=" + CP.AdminKubeconfig}, args[1:]...)
	}
	if user != "" {
		all = append(all, "--as="+user, "--as-group="+group)
	}
	cmd := exec.CommandContext(ctx, name, all...)
	cmd.Env = append(append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECACHEDIR="+t.TempDir()), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := CLIResult{Stdout: out.String(), Stderr: errOut.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.Code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("ichor %v: %v", args, err)
	}
	return r
}

func (r CLIResult) Ok(t *testing.T, what string, want ...string) {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, r.Code, r.Stdout, r.Stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.Stdout, w) {
			t.Errorf("%s: stdout lacks %q\nstdout: %s\nstderr: %s", what, w, r.Stdout, r.Stderr)
		}
	}
}

func (r CLIResult) Fails(t *testing.T, what string, want ...string) {
	t.Helper()
	if r.Code == 0 {
		t.Fatalf("%s succeeded, want a refusal\nstdout: %s", what, r.Stdout)
	}
	if strings.Contains(r.Stderr, "goroutine ") || strings.Contains(r.Stderr, "panic:") {
		t.Errorf("%s printed a Go stack:\n%s", what, r.Stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.Stderr, w) {
			t.Errorf("%s: stderr lacks %q\nstderr: %s", what, w, r.Stderr)
		}
	}
}

// cliDownloads: ichor download saves a talosconfig-reader for an operator,
// 0600; a packet capture the node cuts fails, says how much came, and
// leaves no file, neither the one asked for nor a part of it. Then ichor
// status shows the cluster to a viewer.
func (d *DemoCluster) CLIDownloads(t *testing.T) {
	ctx, cancel := context.WithTimeout(d.Ctx, time.Minute)
	defer cancel()
	dir := t.TempDir()
	reader := filepath.Join(dir, "talosconfig")
	RunIchor(ctx, t, nil, "olivia", "ichor:operator", "--namespace="+d.Ns, "download", "talosconfig-reader", "demo", "-O", reader).
		Ok(t, "ichor download talosconfig-reader")
	if _, err := config.Open(reader); err != nil {
		t.Errorf("the download is not a talosconfig: %v", err)
	}
	if fi, err := os.Stat(reader); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v (%v)", reader, fi.Mode(), err)
	}

	capture := filepath.Join(dir, "worker-1.pcap")
	done := make(chan CLIResult, 1)
	go func() {
		done <- RunIchor(ctx, t, nil, "carol", "ichor:admin", "--namespace="+d.Ns, "download", "packet-capture", "worker-1",
			"--interface", "eth0", "--duration", "59s", "-O", capture)
	}()
	// Its own Event (59s: the kubectl capture before it recorded 1m0s) says the node's bytes flow.
	WaitEventSaying(ctx, t, d.Ns, "worker-1", corev1.EventTypeNormal, "Downloaded", "carol downloaded a 59s packet-capture of link eth0 on TalosMachine worker-1")
	node := d.Nodes["worker-1"]
	if err := node.SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	res := <-done
	node.ClearFaults()
	res.Fails(t, "a capture the node cuts", "was cut after", "nothing was saved to "+capture)
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("after a cut download the directory holds %v, want the talosconfig alone", entries)
	}
	WaitMachine(context.Background(), t, d.Ns, "worker-1", "Ready again", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseReady
	})

	// A viewer sees the cluster at a glance.
	RunIchor(ctx, t, nil, "alice", "ichor:viewer", "--namespace="+d.Ns, "status", "demo").
		Ok(t, "ichor status", "demo  Ready  Talos v1.13.0", "├─ Machines", "│  ├─ cp-1 ", "worker-2", "└─ Warnings (last hour)")
}
