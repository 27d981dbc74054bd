package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client/config"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/talossim"
)

// The ichor command, built as a user installs it (and as kubectl-ichor,
// the kubectl plugin), run against the harness as the people of each role
// with kubectl's impersonation flags.

var (
	ichorBinOnce sync.Once
	ichorBinDir  string
	ichorBinErr  error
)

// ichorBin builds cmd/ichor once into a directory that also holds it as
// kubectl-ichor and kubectl, for PATH.
func ichorBin(t *testing.T) string {
	t.Helper()
	ichorBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ichor-cli-")
		if err != nil {
			ichorBinErr = err
			return
		}
		ichorBinDir = dir
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "ichor"), "ichor.dev/ichor/cmd/ichor").CombinedOutput()
		if err != nil {
			ichorBinErr = err
			t.Logf("go build: %s", out)
			return
		}
		for link, target := range map[string]string{"kubectl-ichor": filepath.Join(dir, "ichor"), "kubectl": filepath.Join(cp.BinDir, "kubectl")} {
			if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
				ichorBinErr = err
				return
			}
		}
	})
	if ichorBinErr != nil {
		t.Fatalf("building cmd/ichor: %v", ichorBinErr)
	}
	return ichorBinDir
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// runIchor runs `ichor args…` (or `kubectl ichor args…` when args[0] is
// "kubectl") as user in groups, with env added.
func runIchor(ctx context.Context, t *testing.T, env []string, user, group string, args ...string) cliResult {
	t.Helper()
	dir := ichorBin(t)
	name := filepath.Join(dir, "ichor")
	all := append([]string{"--kubeconfig=" + cp.AdminKubeconfig}, args...)
	if len(args) > 0 && args[0] == "kubectl" {
		// kubectl takes no flag before a plugin's name.
		name, all = filepath.Join(dir, "kubectl"), append([]string{"ichor", "--kubeconfig=" + cp.AdminKubeconfig}, args[1:]...)
	}
	if user != "" {
		all = append(all, "--as="+user, "--as-group="+group)
	}
	cmd := exec.CommandContext(ctx, name, all...)
	cmd.Env = append(append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECACHEDIR="+t.TempDir()), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errOut.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("ichor %v: %v", args, err)
	}
	return r
}

func (r cliResult) ok(t *testing.T, what string, want ...string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("%s: stdout lacks %q\nstdout: %s\nstderr: %s", what, w, r.stdout, r.stderr)
		}
	}
}

func (r cliResult) fails(t *testing.T, what string, want ...string) {
	t.Helper()
	if r.code == 0 {
		t.Fatalf("%s succeeded, want a refusal\nstdout: %s", what, r.stdout)
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic:") {
		t.Errorf("%s printed a Go stack:\n%s", what, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("%s: stderr lacks %q\nstderr: %s", what, w, r.stderr)
		}
	}
}

func TestCLIActions(t *testing.T) {
	ns := cp.Namespace(t)
	ctx, cancel := context.WithTimeout(apiContext(t), 3*time.Minute)
	defer cancel()
	n := "--namespace=" + ns
	pinnedMachine(t, ns, "w1")
	pinnedMachineOf(t, ns, "c1", v1alpha1.MachineRoleControlPlane)

	// Machines: an operator approves a worker; a rejection needs a reason;
	// a control plane needs an admin, and the refusal says who may.
	runIchor(ctx, t, nil, "olivia", "ichor:operator", n, "approve", "w1", "--reason", "racked in row 4").
		ok(t, "operator approves w1", "talosmachine.ichor.dev/w1 approved")
	m, err := apiClient(t).IchorV1alpha1().TalosMachines(ns).Get(ctx, "w1", metav1.GetOptions{})
	if err != nil || m.Status.Approval == nil || m.Status.Approval.By != "olivia" || m.Status.Approval.Reason != "racked in row 4" {
		t.Fatalf("w1's approval: %+v, %v", m.Status.Approval, err)
	}
	runIchor(ctx, t, nil, "olivia", "ichor:operator", n, "reject", "c1").fails(t, "a rejection without a reason", "a rejection needs a reason")
	runIchor(ctx, t, nil, "olivia", "ichor:operator", n, "approve", "c1").fails(t, "operator approves a control plane",
		`The ichor:admin group (ClusterRole ichor-admin) holds "approve" on talosmachines/privileged-approval`)
	runIchor(ctx, t, nil, "alice", "ichor:viewer", n, "approve", "w1").fails(t, "viewer approves",
		`The ichor:operator group (ClusterRole ichor-operator) holds "patch" on talosmachines/approval`)

	// Operations: start as kubectl's plugin, -o json; a destructive type
	// needs an admin; starting twice is a conflict that says why.
	ops := apiClient(t).IchorV1alpha1().TalosOperations(ns)
	for name, typ := range map[string]v1alpha1.OperationType{"reboot-all": v1alpha1.OperationReboot, "rotate-ca": v1alpha1.OperationCARotation} {
		if _, err := ops.Create(ctx, &v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.TalosOperationSpec{ClusterName: "prod", Type: typ}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := runIchor(ctx, t, nil, "olivia", "ichor:operator", "kubectl", n, "start", "reboot-all", "-o", "json")
	r.ok(t, "kubectl ichor start -o json")
	var started v1alpha1.TalosOperation
	if err := json.Unmarshal([]byte(r.stdout), &started); err != nil || started.Status.StartedBy != "olivia" || started.Kind != "TalosOperation" {
		t.Errorf("start -o json: %+v, %v\n%s", started.Status, err, r.stdout)
	}
	runIchor(ctx, t, nil, "carol", "ichor:admin", n, "start", "reboot-all").fails(t, "a second start", "already started by olivia", "An operation runs once: to run it again, create a new TalosOperation")
	runIchor(ctx, t, nil, "olivia", "ichor:operator", n, "start", "rotate-ca").fails(t, "operator starts a CA rotation",
		`The ichor:admin group (ClusterRole ichor-admin) holds "start" on talosoperations/ca-rotation`)
	runIchor(ctx, t, nil, "carol", "ichor:admin", n, "start", "rotate-ca").ok(t, "admin starts a CA rotation", "talosoperation.ichor.dev/rotate-ca started")
	// Nothing runs these here: a wait gives up, saying so.
	runIchor(ctx, t, nil, "olivia", "ichor:operator", n, "wait", "talosoperation/reboot-all", "--timeout", "2s").
		fails(t, "a wait that times out", "gave up waiting for reboot-all after 2s")

	// Override: admins only, with a check and a reason.
	runIchor(ctx, t, nil, "olivia", "ichor:operator", n, "override", "taloscluster/prod", "--check", "ClusterHealth", "--reason", "m4 is gone").
		fails(t, "operator overrides", `The ichor:admin group (ClusterRole ichor-admin) holds "create" on talosclusters/override`)
	runIchor(ctx, t, nil, "carol", "ichor:admin", n, "override", "tc/prod", "--check", "ClusterHealth", "--reason", "m4 is gone").
		ok(t, "admin overrides", "taloscluster.ichor.dev/prod overridden")
	runIchor(ctx, t, nil, "carol", "ichor:admin", n, "override", "prod", "--check", "ClusterHealth", "--reason", "x").
		fails(t, "an override without a kind", "name the object as KIND/NAME")

	// Downloads: an operator may not take an etcd snapshot; an unknown
	// download is named.
	runIchor(ctx, t, nil, "olivia", "ichor:operator", n, "download", "etcd-snapshot", "c1", "-O", filepath.Join(t.TempDir(), "etcd")).
		fails(t, "operator downloads an etcd snapshot", `The ichor:admin group (ClusterRole ichor-admin) holds "get" on talosmachines/etcd-snapshot`)
	runIchor(ctx, t, nil, "carol", "ichor:admin", n, "download", "kubeconfig", "prod").fails(t, "an unknown download", `"kubeconfig" is not a download`)

	// The plugin shows itself as kubectl ichor.
	help := runIchor(ctx, t, nil, "", "", "kubectl", "--help")
	help.ok(t, "kubectl ichor --help", "kubectl ichor [command]", "approve", "download")
}

// TestCLIPassword: an admin sets a user's password from the environment
// (no terminal); a password the server refuses says why; a viewer may not.
func TestCLIPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(apiContext(t), 2*time.Minute)
	defer cancel()
	users := apiClient(t).IchorV1alpha1().IchorUsers()
	name := "cli-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if _, err := users.Create(ctx, &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleViewer}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = users.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	runIchor(ctx, t, []string{"ICHOR_PASSWORD=correct horse battery"}, "carol", "ichor:admin", "password", name).
		ok(t, "admin sets a password", "ichoruser.ichor.dev/"+name+" password set")
	runIchor(ctx, t, []string{"ICHOR_PASSWORD=short"}, "carol", "ichor:admin", "password", name).fails(t, "a short password", "at least 12")
	runIchor(ctx, t, nil, "carol", "ichor:admin", "password", name).fails(t, "no password given", "no terminal to prompt on")
	runIchor(ctx, t, []string{"ICHOR_PASSWORD=correct horse battery"}, "alice", "ichor:viewer", "password", name).fails(t, "viewer sets a password", "forbidden")
}

// cliDownloads: ichor download saves a talosconfig-reader for an operator,
// 0600; a packet capture the node cuts fails, says how much came, and
// leaves no file, neither the one asked for nor a part of it. Then ichor
// status shows the cluster to a viewer.
func (d *demoCluster) cliDownloads(t *testing.T) {
	ctx, cancel := context.WithTimeout(d.ctx, time.Minute)
	defer cancel()
	dir := t.TempDir()
	reader := filepath.Join(dir, "talosconfig")
	runIchor(ctx, t, nil, "olivia", "ichor:operator", "--namespace="+d.ns, "download", "talosconfig-reader", "demo", "-O", reader).
		ok(t, "ichor download talosconfig-reader")
	if _, err := config.Open(reader); err != nil {
		t.Errorf("the download is not a talosconfig: %v", err)
	}
	if fi, err := os.Stat(reader); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v (%v)", reader, fi.Mode(), err)
	}

	capture := filepath.Join(dir, "worker-1.pcap")
	done := make(chan cliResult, 1)
	go func() {
		done <- runIchor(ctx, t, nil, "carol", "ichor:admin", "--namespace="+d.ns, "download", "packet-capture", "worker-1",
			"--interface", "eth0", "--duration", "59s", "-O", capture)
	}()
	// Its own Event (59s: the kubectl capture before it recorded 1m0s) says the node's bytes flow.
	waitEventSaying(ctx, t, d.ns, "worker-1", corev1.EventTypeNormal, "Downloaded", "carol downloaded a 59s packet-capture of link eth0 on TalosMachine worker-1")
	node := d.nodes["worker-1"]
	if err := node.SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	res := <-done
	node.ClearFaults()
	res.fails(t, "a capture the node cuts", "was cut after", "nothing was saved to "+capture)
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("after a cut download the directory holds %v, want the talosconfig alone", entries)
	}
	waitMachine(context.Background(), t, d.ns, "worker-1", "Ready again", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseReady
	})

	// A viewer sees the cluster at a glance.
	runIchor(ctx, t, nil, "alice", "ichor:viewer", "--namespace="+d.ns, "status", "demo").
		ok(t, "ichor status", "demo  Ready  Talos v1.13.0", "├─ Machines", "│  ├─ cp-1 ", "worker-2", "└─ Warnings (last hour)")
}
