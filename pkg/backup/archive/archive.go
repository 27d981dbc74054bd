// Package archive writes and reads backup files: the content is hashed
// (SHA-256, recorded so a restore can check it), optionally compressed with
// zstd, then encrypted with age to the backup's recipients. It streams: no
// file is ever held whole in memory. Whoever writes a file cannot read it
// back without an identity of one of the recipients.
package archive

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// Summary describes a written file.
type Summary struct {
	// ContentSize is the bytes read from the content.
	ContentSize int64
	// Digest is the SHA-256 of the content, as sha256:<hex>.
	Digest string
	// Size is the bytes written: compressed and encrypted.
	Size int64
}

// Extension is the file name suffix of a file with this compression.
func Extension(c v1alpha1.BackupCompression) string {
	if c == v1alpha1.BackupCompressionZstd {
		return ".zst.age"
	}
	return ".age"
}

// ParseRecipients reads age X25519 public keys.
func ParseRecipients(keys []string) ([]age.Recipient, error) {
	if len(keys) == 0 {
		return nil, errors.New("no age recipient: nobody could decrypt the backup")
	}
	out := make([]age.Recipient, 0, len(keys))
	for _, k := range keys {
		r, err := age.ParseX25519Recipient(k)
		if err != nil {
			return nil, fmt.Errorf("recipient %q: %w", k, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Write copies content to dst, compressed as c says and encrypted to
// recipients. dst is not closed. The file is complete only when Write
// returns nil: a caller that sees an error must not keep what dst holds.
func Write(dst io.Writer, content io.Reader, recipients []age.Recipient, c v1alpha1.BackupCompression) (Summary, error) {
	counted := &countingWriter{w: dst}
	enc, err := age.Encrypt(counted, recipients...)
	if err != nil {
		return Summary{}, fmt.Errorf("start encrypting: %w", err)
	}
	var sink io.Writer = enc
	var zw *zstd.Encoder
	if c == v1alpha1.BackupCompressionZstd {
		// One goroutine and a small window: the controller backs up while
		// it keeps reconciling, and memory stays flat whatever the size.
		if zw, err = zstd.NewWriter(enc, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(4<<20)); err != nil {
			return Summary{}, fmt.Errorf("start compressing: %w", err)
		}
		sink = zw
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(sink, h), content)
	if err != nil {
		if zw != nil {
			zw.Close()
		}
		return Summary{}, fmt.Errorf("after %d bytes: %w", n, err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return Summary{}, fmt.Errorf("finish compressing: %w", err)
		}
	}
	if err := enc.Close(); err != nil {
		return Summary{}, fmt.Errorf("finish encrypting: %w", err)
	}
	return Summary{ContentSize: n, Digest: digest(h.Sum(nil)), Size: counted.n}, nil
}

// ErrChecksumMismatch is returned by Read when the content is not what
// was recorded.
var ErrChecksumMismatch = errors.New("the content's SHA-256 does not match the recorded one")

// Read decrypts src with identities, decompresses it as c says, and copies
// the content to dst, checking it against the digest want (sha256:<hex>,
// when not empty) once all of it was read. A mismatch is ErrChecksumMismatch: what
// dst received must then be thrown away.
func Read(dst io.Writer, src io.Reader, identities []age.Identity, c v1alpha1.BackupCompression, want string) (int64, error) {
	dec, err := age.Decrypt(src, identities...)
	if err != nil {
		return 0, fmt.Errorf("decrypt: %w", err)
	}
	var content io.Reader = dec
	if c == v1alpha1.BackupCompressionZstd {
		zr, err := zstd.NewReader(dec, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(64<<20))
		if err != nil {
			return 0, fmt.Errorf("decompress: %w", err)
		}
		defer zr.Close()
		content = zr
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(dst, h), content)
	if err != nil {
		return n, fmt.Errorf("read the content after %d bytes: %w", n, err)
	}
	if got := digest(h.Sum(nil)); want != "" && got != want {
		return n, fmt.Errorf("%w: recorded %s, read %s", ErrChecksumMismatch, want, got)
	}
	return n, nil
}

func digest(sum []byte) string { return "sha256:" + hex.EncodeToString(sum) }

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
