// Package passwordhash hashes IchorUser passwords with argon2id and checks
// them, in the PHC string format ($argon2id$v=19$m=…,t=…,p=…$salt$hash) so
// that parameters can grow without invalidating stored hashes.
package passwordhash

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// Parameters are OWASP's argon2id minimum: 19 MiB, two passes, one lane.
const (
	memoryKiB = 19 * 1024
	passes    = 2
	lanes     = 1
	saltLen   = 16
	keyLen    = 32
)

// Password length bounds: MinLength characters, MaxBytes bytes.
const (
	MinLength = 12
	MaxBytes  = 1024
)

// Check returns why password is not acceptable, or nil.
func Check(password string) error {
	switch {
	case !utf8.ValidString(password):
		return errors.New("must be valid UTF-8")
	case utf8.RuneCountInString(password) < MinLength:
		return fmt.Errorf("must be at least %d characters long", MinLength)
	case len(password) > MaxBytes:
		return fmt.Errorf("must be at most %d bytes long", MaxBytes)
	}
	return nil
}

// Hash returns the argon2id hash of password with a fresh salt.
func Hash(password string) (string, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(password), salt, passes, memoryKiB, lanes, keyLen)
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, memoryKiB, passes, lanes,
		enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// Verify reports whether password matches hash, in constant time.
func Verify(hash, password string) (bool, error) {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return false, errors.New("not an argon2id PHC string")
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, fmt.Errorf("unsupported argon2 version %q", parts[2])
	}
	var memory, time uint32
	var threads uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &memory, &time, &threads); err != nil {
		return false, fmt.Errorf("bad argon2id parameters %q: %w", parts[3], err)
	}
	enc := base64.RawStdEncoding
	salt, err := enc.DecodeString(parts[4])
	if err != nil {
		return false, fmt.Errorf("bad salt: %w", err)
	}
	want, err := enc.DecodeString(parts[5])
	if err != nil {
		return false, fmt.Errorf("bad hash: %w", err)
	}
	got := argon2.IDKey([]byte(password), salt, time, memory, threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// decoy is a hash of a random password that no one knows, with the current
// parameters: VerifyNothing checks against it.
var decoy = func() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	h, err := Hash(base64.RawStdEncoding.EncodeToString(b))
	if err != nil {
		panic(err)
	}
	return h
}()

// VerifyNothing costs what Verify costs and matches nothing: a sign-in for
// a user who does not exist, or has no password, takes as long as one with
// a wrong password, so that the time of the answer does not tell them apart.
// It hashes at most MaxBytes of password, as Verify of an accepted one does.
func VerifyNothing(password string) {
	if len(password) > MaxBytes {
		password = password[:MaxBytes]
	}
	_, _ = Verify(decoy, password)
}

// MaxConcurrent bounds the password checks a process runs at once: each
// holds memoryKiB of memory, so unbounded checks are a way to exhaust it.
const MaxConcurrent = 4

var slots = make(chan struct{}, MaxConcurrent)

// Acquire takes one of MaxConcurrent slots for a password check without
// waiting: ok is false when all are taken (answer "try again" rather than
// queue), else release gives the slot back.
func Acquire() (release func(), ok bool) {
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, true
	default:
		return nil, false
	}
}
