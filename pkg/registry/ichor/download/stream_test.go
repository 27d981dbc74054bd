package download

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// copyOut copies s as the API server's stream copy does, and reports what
// arrived and the value the copy panicked with, if any.
func copyOut(s *stream) (out string, panicked any) {
	var b strings.Builder
	func() {
		defer func() { panicked = recover() }()
		_, _ = io.Copy(&b, s)
	}()
	return b.String(), panicked
}

func TestAStreamThatBreaksAbortsTheResponse(t *testing.T) {
	lost := status.Error(codes.Unavailable, "connection reset")
	released := false
	s := &stream{
		r:       bufio.NewReaderSize(io.MultiReader(strings.NewReader("pcap header"), &failing{lost}), peekSize),
		body:    io.NopCloser(nil),
		release: func() { released = true },
		what:    "a 30s packet-capture",
	}
	out, panicked := copyOut(s)
	if panicked != http.ErrAbortHandler {
		t.Fatalf("the copy of a broken stream panicked with %v, want http.ErrAbortHandler", panicked)
	}
	if out != "pcap header" {
		t.Errorf("before the break the client got %q", out)
	}
	if err := s.Close(); err != nil || !released {
		t.Errorf("Close() = %v, released %t", err, released)
	}
}

func TestAStreamThatEndsIsCopiedWhole(t *testing.T) {
	s := &stream{r: bufio.NewReaderSize(strings.NewReader("the whole snapshot"), peekSize), body: io.NopCloser(nil)}
	if out, panicked := copyOut(s); panicked != nil || out != "the whole snapshot" {
		t.Errorf("copy = %q, panic %v", out, panicked)
	}
}

type failing struct{ err error }

func (f *failing) Read([]byte) (int, error) { return 0, f.err }
