package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"filippo.io/age"
	"sigs.k8s.io/yaml"

	"ichor.dev/ichor/pkg/atomicfile"
)

// PassphraseEnv holds the passphrase of the local sealed copy, for
// automation, when stdin is not a terminal and no --passphrase-file is given.
const PassphraseEnv = "ICHOR_PASSPHRASE"

// minPassphrase is the shortest passphrase init accepts: the sealed copy is
// the cluster's root of trust, kept on a laptop.
const minPassphrase = 12

// sealed is what ichor init keeps of a cluster, sealed in
// ~/.ichor/clusters/<name>/bundle.age: the secrets bundle, and where the
// cluster is, so that break-glass needs nothing else.
type sealed struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	// Endpoint is the cluster's Kubernetes API (spec.controlPlane.endpoint).
	Endpoint string `json:"endpoint"`
	// Bundle is the secrets bundle, as talosctl gen secrets writes it.
	Bundle string `json:"bundle"`
}

// clusterDir is where the sealed copy of cluster name lives.
func clusterDir(name string) (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".ichor", "clusters", name), nil
}

const sealedFile = "bundle.age"

// sealWorkFactor is the scrypt work factor (log2 N) of a new seal, above
// age's default of 18: the sealed copy is the root of trust, kept where a
// thief may try passphrases offline. 20 is four times the work: seconds,
// and 1 GiB of memory, to seal or open. Bundles sealed at 18 open as
// before (age reads up to 22).
var sealWorkFactor = 20

// seal writes s, encrypted to passphrase with age's scrypt recipient, beside
// dir/bundle.age (directory 0700, file 0600), and returns commit, which puts
// it in place, and abort, which removes it: the caller commits once the
// bundle is stored in the cluster too, so that a failed init leaves neither
// half. An existing copy is refused unless overwrite.
func seal(dir string, s *sealed, passphrase string, overwrite bool) (commit func() error, abort func(), err error) {
	path := filepath.Join(dir, sealedFile)
	if _, err := os.Stat(path); err == nil && !overwrite {
		return nil, nil, fmt.Errorf("%s exists: a bundle was sealed for this cluster already; --force replaces it (the old one is lost)", path)
	}
	plain, err := yaml.Marshal(s)
	if err != nil {
		return nil, nil, err
	}
	r, err := age.NewScryptRecipient(passphrase)
	if err != nil {
		return nil, nil, err
	}
	r.SetWorkFactor(sealWorkFactor)
	var out bytes.Buffer
	w, err := age.Encrypt(&out, r)
	if err != nil {
		return nil, nil, err
	}
	if _, err := w.Write(plain); err != nil {
		return nil, nil, err
	}
	if err := w.Close(); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, nil, err
	}
	next, err := atomicfile.Stage(path, 0o600, func(w io.Writer) error {
		_, err := w.Write(out.Bytes())
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return next.Commit, next.Abort, nil
}

// unseal opens dir/bundle.age with passphrase.
func unseal(dir, passphrase string) (*sealed, error) {
	path := filepath.Join(dir, sealedFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no sealed copy at %s: ichor init writes it", path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck
	id, err := age.NewScryptIdentity(passphrase)
	if err != nil {
		return nil, err
	}
	r, err := age.Decrypt(f, id)
	if err != nil {
		var wrong *age.NoIdentityMatchError
		if errors.As(err, &wrong) || strings.Contains(err.Error(), "incorrect passphrase") {
			return nil, fmt.Errorf("%s: wrong passphrase", path)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	plain, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var s sealed
	if err := yaml.Unmarshal(plain, &s); err != nil {
		return nil, fmt.Errorf("%s does not hold what ichor init seals", path)
	}
	return &s, nil
}

// readPassphrase reads the passphrase: from file, from a terminal (twice
// when confirm, without echo), or from PassphraseEnv. A new one (confirm)
// must be long enough.
func readPassphrase(o *Options, file string, confirm bool) (string, error) {
	p, err := readSecret(o, file, secretInput{what: "passphrase", prompt: "Passphrase", env: PassphraseEnv, confirm: confirm, unchanged: "nothing was written"})
	if err != nil {
		return "", err
	}
	if confirm && len(p) < minPassphrase {
		return "", fmt.Errorf("the passphrase must be at least %d characters: it guards the cluster's root of trust", minPassphrase)
	}
	return p, nil
}
