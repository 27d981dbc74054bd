package talos_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"ichor.dev/ichor/pkg/talos"
)

// roleSessions installs a control plane on a simulated node and returns its
// secrets and a way to open sessions with it that hold only some roles.
func roleSessions(ctx context.Context, t *testing.T) (*secrets.Bundle, func(...role.Role) talos.Node) {
	t.Helper()
	n := startNode(t, simOptions())
	bundle, cfg := controlPlaneConfig(t)
	installed(ctx, t, n, bundle, cfg)
	return bundle, func(roles ...role.Role) talos.Node { return sessionAs(ctx, t, n.Addr(), bundle, roles...) }
}

func TestSupportBundleAsReader(t *testing.T) {
	ctx := callContext(t)
	bundle, session := roleSessions(ctx, t)
	reader := session(role.Reader)

	var buf bytes.Buffer
	if err := reader.SupportBundle(ctx, &buf); err != nil {
		t.Fatalf("SupportBundle: %v", err)
	}
	z, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatalf("the bundle is not a zip archive: %v", err)
	}
	files := map[string]string{}
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		files[f.Name] = string(b)
	}
	for name, want := range map[string]string{
		"version":                        "Tag:        v1.13.0",
		"services":                       "etcd",
		"service-logs/apid.log":          "apid: simulated log line 10 of 10",
		"service-logs/kubelet.log":       "kubelet: simulated log line 1 of 10",
		"dmesg.log":                      "Linux version",
		"resources/linkstatuses.yaml":    "id: eth0",
		"resources/machinetypes.yaml":    "controlplane",
		"resources/machinestatuses.yaml": "stage: running",
	} {
		if got, ok := files[name]; !ok || !strings.Contains(got, want) {
			t.Errorf("%s: want it to hold %q, got (present %v)\n%s", name, want, ok, got)
		}
	}
	// A reader reads everything in the bundle: nothing is missing.
	if e, ok := files["errors.txt"]; ok {
		t.Errorf("a reader's bundle has errors:\n%s", e)
	}
	// Nothing secret: no key, no cluster secret.
	for name, body := range files {
		if strings.Contains(body, "PRIVATE KEY") || strings.Contains(body, bundle.Cluster.Secret) {
			t.Errorf("%s holds secret material", name)
		}
	}

	// A session without read rights gets a bundle that says what it missed.
	buf.Reset()
	noone := session(role.EtcdBackup)
	if err := noone.SupportBundle(ctx, &buf); err != nil {
		t.Fatalf("SupportBundle as os:etcd:backup: %v", err)
	}
	z, err = zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	var errorsTxt string
	for _, f := range z.File {
		if f.Name == "errors.txt" {
			r, _ := f.Open()
			b, _ := io.ReadAll(r)
			errorsTxt = string(b)
		}
	}
	if !strings.Contains(errorsTxt, "version: ") || !strings.Contains(errorsTxt, "PermissionDenied") {
		t.Errorf("errors.txt of a bundle read without rights:\n%s", errorsTxt)
	}

	// A writer that fails stops the bundle with its error.
	boom := errors.New("the client went away")
	if err := reader.SupportBundle(ctx, failingWriter{boom}); !errors.Is(err, boom) {
		t.Errorf("SupportBundle into a failing writer: %v, want %v", err, boom)
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

func TestPacketCaptureAsOperator(t *testing.T) {
	ctx := callContext(t)
	_, session := roleSessions(ctx, t)
	operator := session(role.Operator)

	if _, err := operator.PacketCapture(ctx, talos.PacketCapture{Interface: "eth9"}); !errors.Is(err, talos.ErrNoSuchLink) {
		t.Errorf("capture on a missing link: %v, want ErrNoSuchLink", err)
	}

	captureCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := operator.PacketCapture(captureCtx, talos.PacketCapture{Interface: "eth0", SnapLength: 128})
	if err != nil {
		t.Fatalf("PacketCapture: %v", err)
	}
	header := make([]byte, 24)
	if _, err := io.ReadFull(r, header); err != nil {
		t.Fatal(err)
	}
	if magic, snap := binary.LittleEndian.Uint32(header), binary.LittleEndian.Uint32(header[16:]); magic != 0xa1b2c3d4 || snap != 128 {
		t.Errorf("pcap header: magic %#x snaplen %d", magic, snap)
	}
	cancel()
	_ = r.Close()

	// A timed capture ends cleanly however its deadline is noticed.
	r, err = operator.PacketCapture(ctx, talos.PacketCapture{Interface: "eth0", Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("PacketCapture: %v", err)
	}
	if pcap, err := io.ReadAll(r); err != nil || len(pcap) < 24 {
		t.Errorf("a timed capture read %d bytes and ended with %v, want a pcap file and io.EOF", len(pcap), err)
	}
	_ = r.Close()

	// os:reader may not capture: machined allows it to operators and admins.
	reader := session(role.Reader)
	r, err = reader.PacketCapture(ctx, talos.PacketCapture{Interface: "eth0"})
	if err == nil {
		_, err = io.ReadAll(r)
	}
	if err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Errorf("capture as os:reader: %v, want PermissionDenied", err)
	}
}
