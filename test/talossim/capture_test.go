package talossim

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// pcapPacket is one parsed pcap record.
type pcapPacket struct {
	captured, original uint32
	data               []byte
}

// readPcap reads the global header and count records from r, checking the classic libpcap layout.
func readPcap(t *testing.T, r io.Reader, count int) (snapLen, linkType uint32, packets []pcapPacket) {
	t.Helper()

	hdr := make([]byte, pcapHeaderSize)
	if _, err := io.ReadFull(r, hdr); err != nil {
		t.Fatalf("reading pcap header: %v", err)
	}

	le := binary.LittleEndian
	if magic := le.Uint32(hdr[0:]); magic != 0xa1b2c3d4 {
		t.Fatalf("pcap magic = %#x", magic)
	}

	if major, minor := le.Uint16(hdr[4:]), le.Uint16(hdr[6:]); major != 2 || minor != 4 {
		t.Fatalf("pcap version = %d.%d", major, minor)
	}

	if zone, sigfigs := le.Uint32(hdr[8:]), le.Uint32(hdr[12:]); zone != 0 || sigfigs != 0 {
		t.Fatalf("pcap thiszone %d sigfigs %d", zone, sigfigs)
	}

	for range count {
		rec := make([]byte, pcapRecordHdrSize)
		if _, err := io.ReadFull(r, rec); err != nil {
			t.Fatalf("reading record header: %v", err)
		}

		p := pcapPacket{captured: le.Uint32(rec[8:]), original: le.Uint32(rec[12:])}
		if usec := le.Uint32(rec[4:]); usec >= 1e6 || le.Uint32(rec[0:]) == 0 {
			t.Fatalf("bad record timestamp %d.%06d", le.Uint32(rec[0:]), usec)
		}

		p.data = make([]byte, p.captured)
		if _, err := io.ReadFull(r, p.data); err != nil {
			t.Fatalf("reading packet: %v", err)
		}

		packets = append(packets, p)
	}

	return le.Uint32(hdr[16:]), le.Uint32(hdr[20:]), packets
}

func TestPacketCapture(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, _ := installedNode(t, cl, simOptions())
	clients := roleClients(t, n, cl)

	capture := func(ctx context.Context, c *client.Client, req *machineapi.PacketCaptureRequest) io.ReadCloser {
		r, err := c.PacketCapture(ctx, req)
		if err != nil {
			t.Fatalf("PacketCapture: %v", err)
		}

		return r
	}

	// Denied and unknown-interface errors surface on the first read, as with the real client.
	_, err := readAll(capture(ctx, clients[role.Reader], &machineapi.PacketCaptureRequest{Interface: "eth0"}))
	wantDenied(t, err)

	_, err = readAll(capture(ctx, clients[role.Operator], &machineapi.PacketCaptureRequest{Interface: "eth9"}))
	wantCode(t, err, codes.NotFound, `interface "eth9" not found`)

	// Full packets with the default snap length.
	capCtx, cancel := context.WithCancel(ctx)
	r := capture(capCtx, clients[role.Operator], &machineapi.PacketCaptureRequest{Interface: "eth0", Promiscuous: true})

	snapLen, linkType, packets := readPcap(t, r, CapturePackets)
	if snapLen != DefaultSnapLen || linkType != 1 {
		t.Fatalf("snaplen %d linktype %d", snapLen, linkType)
	}

	wantSrc := netip.MustParseAddr("10.5.0.2").As4()

	for i, p := range packets {
		d := p.data
		if p.captured != p.original || len(d) < 42 {
			t.Fatalf("packet %d: captured %d of %d", i, p.captured, p.original)
		}

		if binary.BigEndian.Uint16(d[12:]) != 0x0800 || d[14] != 0x45 || d[23] != 17 || [4]byte(d[26:30]) != wantSrc {
			t.Fatalf("packet %d is not IPv4/UDP from 10.5.0.2: % x", i, d[:42])
		}

		if ipv4Checksum(d[14:34]) != 0 {
			t.Fatalf("packet %d: bad IPv4 header checksum", i)
		}

		if port := binary.BigEndian.Uint16(d[36:]); port != 9 {
			t.Fatalf("packet %d: UDP destination port %d", i, port)
		}

		if want := fmt.Sprintf("talossim packet %d", i); string(d[42:]) != want {
			t.Fatalf("packet %d payload %q", i, d[42:])
		}
	}

	// The capture then idles until the client cancels, which ends the
	// stream: machinery's client (from v1.14) reads that as the error
	// Canceled, as it reads any end but io.EOF.
	cancel()

	if rest, err := readAll(r); status.Code(err) != codes.Canceled || len(rest) != 0 {
		t.Fatalf("after cancel: %d more bytes, %v", len(rest), err)
	}

	// A requested snap length truncates packets.
	capCtx, cancel = context.WithCancel(ctx)
	defer cancel()

	r = capture(capCtx, clients[role.Admin], &machineapi.PacketCaptureRequest{Interface: "eth0", SnapLen: 40})

	snapLen, _, packets = readPcap(t, r, 1)
	if snapLen != 40 || packets[0].captured != 40 || packets[0].original <= 40 {
		t.Fatalf("snaplen %d: captured %d of %d", snapLen, packets[0].captured, packets[0].original)
	}

	r.Close() //nolint:errcheck
}
