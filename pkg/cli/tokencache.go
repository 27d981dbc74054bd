package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"ichor.dev/ichor/pkg/atomicfile"
)

// signIn is one sign-in kept in ~/.ichor/tokens/: the token kubectl sends,
// the refresh token that renews it, and how to reach the issuer. The file
// is the user's alone (0600, in a 0700 directory); the kubeconfig holds no
// secret, only the command that reads this.
type signIn struct {
	Issuer string `json:"issuer"`
	// Username is the IchorUser of a sign-in at Ichor's issuer; ClientID,
	// the client of a sign-in at an OpenID provider.
	Username string `json:"username,omitempty"`
	ClientID string `json:"clientID,omitempty"`
	// Subject is the provider's sub of an OpenID sign-in: a renewal must
	// name the same.
	Subject string `json:"subject,omitempty"`
	// CertificateAuthority is the PEM of the CA that issued the issuer's
	// serving certificate, when it is not one the system trusts.
	CertificateAuthority string    `json:"certificateAuthority,omitempty"`
	IDToken              string    `json:"idToken"`
	Expiry               time.Time `json:"expiry"`
	RefreshToken         string    `json:"refreshToken"`
}

// signInPath is where the sign-in of who (an IchorUser, or client:ID at
// an OpenID provider) at issuer is kept.
func signInPath(issuer, who string) (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(issuer + "\x00" + who))
	return filepath.Join(home, ".ichor", "tokens", hex.EncodeToString(sum[:12])+".json"), nil
}

// lockSignIn takes the lock of the sign-in at path, so that kubectl
// commands run at once renew it once, and returns its release.
func lockSignIn(path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// errNotSignedIn: no sign-in is kept.
var errNotSignedIn = errors.New("not signed in")

// readSignIn reads the sign-in at path.
func readSignIn(path string) (*signIn, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNotSignedIn
	}
	if err != nil {
		return nil, err
	}
	var s signIn
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

// writeSignIn replaces the sign-in at path at once (a new file renamed
// over it), readable by the user only.
func writeSignIn(path string, s *signIn) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, 0o600, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
