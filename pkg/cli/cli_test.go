package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestSaveIsHonest: a stream cut partway is an error that says how much
// came, and leaves no file, neither the one asked for nor a part; a whole
// stream lands in the file, 0600, and says so.
func TestSaveIsHonest(t *testing.T) {
	dir := t.TempDir()
	var errOut bytes.Buffer
	o := &Options{IOStreams: genericiooptions.IOStreams{Out: io.Discard, ErrOut: &errOut}}
	path := filepath.Join(dir, "m1-etcd.snapshot")

	cut := io.MultiReader(strings.NewReader(strings.Repeat("x", 3000)), iotestErr{errors.New("stream error: stream ID 3; INTERNAL_ERROR")})
	err := save(context.Background(), o, cut, path, "etcd-snapshot m1")
	if err == nil || !strings.Contains(err.Error(), "cut after 2.9 KiB") || !strings.Contains(err.Error(), "nothing was saved to "+path) {
		t.Fatalf("cut stream: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a cut stream left %v", entries)
	}

	if err := save(context.Background(), o, strings.NewReader("snapshot"), path, "etcd-snapshot m1"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if err != nil || string(b) != "snapshot" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved %q (%v), mode %v", b, err, fi.Mode())
	}
	if !strings.Contains(errOut.String(), "etcd-snapshot m1: 8 B in") || !strings.Contains(errOut.String(), "to "+path) {
		t.Errorf("progress line %q", errOut.String())
	}
}

type iotestErr struct{ err error }

func (e iotestErr) Read([]byte) (int, error) { return 0, e.err }

// TestHolderHint: the refusals of ichor-apiserver and of kube-apiserver's
// RBAC name the lowest role that holds what is missing, as roles.yaml
// grants it.
func TestHolderHint(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{`user "alice" cannot approve TalosMachine: it needs the "approve" verb on resource "talosmachines", subresource "approval"`,
			`The ichor:operator group (ClusterRole ichor-operator) holds "approve" on talosmachines/approval`},
		{`it needs the "approve" verb on resource "talosmachines", subresource "privileged-approval"`,
			`The ichor:admin group (ClusterRole ichor-admin) holds "approve" on talosmachines/privileged-approval`},
		{`it needs the "start" verb on resource "talosoperations", subresource "reboot"`,
			`The ichor:operator group (ClusterRole ichor-operator) holds "start" on talosoperations/reboot`},
		{`it needs the "start" verb on resource "talosoperations", subresource "node-reset"`,
			`The ichor:admin group (ClusterRole ichor-admin) holds "start" on talosoperations/node-reset`},
		{`talosoperations.ichor.dev "x" is forbidden: User "alice" cannot create resource "talosoperations/start" in API group "ichor.dev" in the namespace "demo"`,
			`The ichor:operator group (ClusterRole ichor-operator) holds "create" on talosoperations/start`},
		{`User "alice" cannot get resource "talosmachines" in API group "ichor.dev"`,
			`The ichor:viewer group (ClusterRole ichor-viewer) holds "get" on talosmachines`},
		{`it needs the "download" verb on resource "talosclusters", subresource "talosconfig-reader"`,
			`The ichor:operator group (ClusterRole ichor-operator) holds "download" on talosclusters/talosconfig-reader`},
		{`it needs the "escalate" verb on resource "talosclusters"`, `No Ichor role holds "escalate" on talosclusters`},
		{`something else entirely`, ``},
	} {
		if got := holderHint(tc.msg); (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s\n got %q\nwant %q", tc.msg, got, tc.want)
		}
	}
}

// TestSealRoundTrip: what init seals opens with its passphrase only; a
// wrong one says so; an uncommitted seal leaves nothing, and a committed
// one is not replaced without overwrite.
func TestSealRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "clusters", "demo")
	want := &sealed{Cluster: "demo", Namespace: "ns", Endpoint: "https://127.0.0.1:6443", Bundle: "cluster:\n  id: x\n"}
	_, abort, err := seal(dir, want, "correct horse battery", false)
	if err != nil {
		t.Fatal(err)
	}
	abort()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("an aborted seal left %v", entries)
	}
	commit, _, err := seal(dir, want, "correct horse battery", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := seal(dir, want, "another passphrase", false); err == nil || !strings.Contains(err.Error(), "--force replaces it") {
		t.Errorf("a second seal: %v", err)
	}
	if _, err := unseal(dir, "not the passphrase"); err == nil || !strings.Contains(err.Error(), "wrong passphrase") {
		t.Errorf("wrong passphrase: %v", err)
	}
	got, err := unseal(dir, "correct horse battery")
	if err != nil || *got != *want {
		t.Fatalf("unsealed %+v, %v", got, err)
	}
	fi, _ := os.Stat(dir)
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v", fi.Mode())
	}
}
