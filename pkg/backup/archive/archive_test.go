package archive

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"

	"filippo.io/age"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

func TestRoundTrip(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := age.GenerateX25519Identity()
	recipients, err := ParseRecipients([]string{id.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	content := make([]byte, 3<<20)
	copy(content[1<<20:], bytes.Repeat([]byte("etcd"), 1<<18)) // some of it compresses
	if _, err := rand.Read(content[:1<<20]); err != nil {
		t.Fatal(err)
	}
	for _, c := range []v1alpha1.BackupCompression{v1alpha1.BackupCompressionZstd, v1alpha1.BackupCompressionNone} {
		var sealed bytes.Buffer
		sum, err := Write(&sealed, bytes.NewReader(content), recipients, c)
		if err != nil {
			t.Fatal(err)
		}
		if sum.ContentSize != int64(len(content)) || sum.Size != int64(sealed.Len()) || !strings.HasPrefix(sum.Digest, "sha256:") {
			t.Fatalf("%s: summary %+v for %d bytes sealed", c, sum, sealed.Len())
		}
		if bytes.Contains(sealed.Bytes(), content[1<<20:1<<20+64]) {
			t.Fatalf("%s: the sealed file holds the content in the clear", c)
		}
		var out bytes.Buffer
		if n, err := Read(&out, bytes.NewReader(sealed.Bytes()), []age.Identity{id}, c, sum.Digest); err != nil || n != int64(len(content)) || !bytes.Equal(out.Bytes(), content) {
			t.Fatalf("%s: read back %d bytes, %v", c, n, err)
		}
		if _, err := Read(io.Discard, bytes.NewReader(sealed.Bytes()), []age.Identity{other}, c, ""); err == nil {
			t.Fatalf("%s: another identity decrypted it", c)
		}
		wrong := "sha256:" + strings.Repeat("0", 64)
		if _, err := Read(io.Discard, bytes.NewReader(sealed.Bytes()), []age.Identity{id}, c, wrong); !errors.Is(err, ErrChecksumMismatch) {
			t.Fatalf("%s: a wrong digest: %v", c, err)
		}
		cut := sealed.Bytes()[:sealed.Len()-100]
		if _, err := Read(io.Discard, bytes.NewReader(cut), []age.Identity{id}, c, sum.Digest); err == nil {
			t.Fatalf("%s: a cut file read back", c)
		}
	}
}

func TestWriteReportsASourceThatBreaks(t *testing.T) {
	id, _ := age.GenerateX25519Identity()
	broken := io.MultiReader(strings.NewReader("partial"), iotestErrReader{})
	if _, err := Write(io.Discard, broken, []age.Recipient{id.Recipient()}, v1alpha1.BackupCompressionZstd); err == nil || !strings.Contains(err.Error(), "after 7 bytes") {
		t.Fatalf("Write = %v", err)
	}
	if _, err := ParseRecipients(nil); err == nil {
		t.Fatal("no recipient was accepted")
	}
	if _, err := ParseRecipients([]string{"age1nope"}); err == nil {
		t.Fatal("a bad recipient was accepted")
	}
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("stream cut") }
