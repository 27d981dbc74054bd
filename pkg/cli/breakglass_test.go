package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"

	"ichor.dev/ichor/pkg/secretsbundle"
)

// sealAtOldWorkFactor has seal use age's default scrypt work factor, 18,
// for the test: what init sealed before the factor was raised, and a
// quarter of the time, which the race detector multiplies.
func sealAtOldWorkFactor(t *testing.T) {
	old := sealWorkFactor
	sealWorkFactor = 18
	t.Cleanup(func() { sealWorkFactor = old })
}

// TestBreakGlassReplacesTheFile: break-glass -O onto an existing file
// that others may read leaves a new file that only its owner reads, with
// the credential in it; the passphrase comes from --passphrase-file.
func TestBreakGlassReplacesTheFile(t *testing.T) {
	sealAtOldWorkFactor(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	data, err := secretsbundle.Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := clusterDir("demo")
	if err != nil {
		t.Fatal(err)
	}
	commit, _, err := seal(dir, &sealed{Cluster: "demo", Namespace: "ns", Endpoint: "https://127.0.0.1:6443", Bundle: string(data)}, "correct horse battery", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	passphraseFile := filepath.Join(home, "passphrase")
	if err := os.WriteFile(passphraseFile, []byte("correct horse battery\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(home, "demo.kubeconfig")
	if err := os.WriteFile(out, []byte("an older file, readable by all\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}

	var errOut bytes.Buffer
	cmd := newBreakGlass(&Options{IOStreams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: &errOut}})
	cmd.SetArgs([]string{"kubeconfig", "demo", "--passphrase-file", passphraseFile, "-O", out})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("break-glass: %v\n%s", err, errOut.String())
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s is %v after break-glass wrote a credential into it, want 0600", out, fi.Mode().Perm())
	}
	cfg, err := clientcmd.LoadFromFile(out)
	if err != nil || cfg.CurrentContext != "admin@demo" || len(cfg.AuthInfos["admin@demo"].ClientKeyData) == 0 {
		t.Fatalf("%s does not hold the break-glass kubeconfig: %v", out, err)
	}
	if entries, _ := os.ReadDir(home); len(entries) != 3 { // .ichor, passphrase, the kubeconfig
		t.Errorf("break-glass left %d entries in the directory, want 3", len(entries))
	}
}
