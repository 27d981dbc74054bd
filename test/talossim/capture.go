package talossim

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// DefaultSnapLen is the snap length written to the pcap header when the request leaves it zero. Talos
// uses afpacket's default frame size, 4096 (talosctl pcap no longer sends one).
const DefaultSnapLen = 4096

// CapturePackets is how many synthetic packets a PacketCapture stream carries. After them the stream
// stays open and idle, like a capture on a quiet link, until the client cancels its context (or the
// node's API goes down); it never ends on its own.
const CapturePackets = 4

// pcap file format constants (classic libpcap, microsecond timestamps, little endian).
const (
	pcapMagic         = 0xa1b2c3d4
	pcapVersionMajor  = 2
	pcapVersionMinor  = 4
	pcapHeaderSize    = 24
	pcapRecordHdrSize = 16
	linkTypeEthernet  = 1
	linkTypeRaw       = 101
	capturePacketGap  = 10 * time.Millisecond
	captureUDPPort    = 9 // discard
	captureRemoteIPv4 = "192.0.2.1"
)

// PacketCapture streams a pcap capture of a link: the file header, CapturePackets synthetic
// Ethernet/IPv4/UDP packets from the node, then nothing until the client cancels. Promiscuous mode and
// BPF filters are accepted and ignored. An unknown interface is NotFound, as on Talos.
func (s *machineServer) PacketCapture(in *machine.PacketCaptureRequest, srv machine.MachineService_PacketCaptureServer) error {
	n := s.node
	ctx := srv.Context()

	link, err := safe.StateGetByID[*network.LinkStatus](ctx, n.st, in.GetInterface())
	if err != nil {
		if state.IsNotFoundError(err) {
			return status.Errorf(codes.NotFound, "interface %q not found", in.GetInterface())
		}

		return err
	}

	var linkType uint32

	switch t := link.TypedSpec().Type; t { //nolint:exhaustive
	case nethelpers.LinkEther, nethelpers.LinkLoopbck:
		linkType = linkTypeEthernet
	case nethelpers.LinkNone:
		linkType = linkTypeRaw
	default:
		return status.Errorf(codes.InvalidArgument, "unsupported link type %s", t)
	}

	snapLen := in.GetSnapLen()
	if snapLen == 0 {
		snapLen = DefaultSnapLen
	}

	if err = srv.Send(&common.Data{Bytes: pcapFileHeader(snapLen, linkType)}); err != nil {
		return err
	}

	src := n.captureSourceIP()
	start := time.Now()

	for i := range CapturePackets {
		frame := udpFrame(net.HardwareAddr(link.TypedSpec().HardwareAddr), src, i)
		if err = srv.Send(&common.Data{Bytes: pcapRecord(start.Add(time.Duration(i)*capturePacketGap), frame, snapLen)}); err != nil {
			return err
		}
	}

	return s.waitStreamEnd(ctx, nil)
}

// captureSourceIP is the node's first IPv4 address, or a documentation address.
func (n *Node) captureSourceIP() netip.Addr {
	for _, p := range n.opts.Addresses {
		if p.Addr().Is4() {
			return p.Addr()
		}
	}

	if n.listenIP.Is4() {
		return n.listenIP
	}

	return netip.MustParseAddr("192.0.2.10")
}

// pcapFileHeader is the 24-byte libpcap global header.
func pcapFileHeader(snapLen, linkType uint32) []byte {
	b := make([]byte, pcapHeaderSize)
	binary.LittleEndian.PutUint32(b[0:], pcapMagic)
	binary.LittleEndian.PutUint16(b[4:], pcapVersionMajor)
	binary.LittleEndian.PutUint16(b[6:], pcapVersionMinor)
	// thiszone and sigfigs stay 0
	binary.LittleEndian.PutUint32(b[16:], snapLen)
	binary.LittleEndian.PutUint32(b[20:], linkType)

	return b
}

// pcapRecord is one packet record: header (timestamp, captured and original length) and the frame
// truncated to snapLen.
func pcapRecord(ts time.Time, frame []byte, snapLen uint32) []byte {
	captured := min(uint32(len(frame)), snapLen) //nolint:gosec // frames are small

	b := make([]byte, pcapRecordHdrSize, pcapRecordHdrSize+int(captured))
	binary.LittleEndian.PutUint32(b[0:], uint32(ts.Unix()))           //nolint:gosec // pcap stores 32-bit seconds
	binary.LittleEndian.PutUint32(b[4:], uint32(ts.Nanosecond()/1e3)) //nolint:gosec // < 1e6
	binary.LittleEndian.PutUint32(b[8:], captured)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(frame))) //nolint:gosec // frames are small

	return append(b, frame[:captured]...)
}

// udpFrame builds synthetic packet i: an Ethernet frame from mac carrying an IPv4/UDP datagram from src
// to a documentation address, with a valid IPv4 header checksum.
func udpFrame(mac net.HardwareAddr, src netip.Addr, i int) []byte {
	payload := fmt.Appendf(nil, "talossim packet %d", i)

	const ethLen, ipLen, udpLen = 14, 20, 8

	b := make([]byte, ethLen+ipLen+udpLen+len(payload))

	// Ethernet: broadcast destination, node MAC source, IPv4 ethertype.
	copy(b[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(b[6:12], mac)
	binary.BigEndian.PutUint16(b[12:], 0x0800)

	ip := b[ethLen : ethLen+ipLen]
	ip[0] = 0x45                                                          // version 4, 5-word header
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen+udpLen+len(payload))) //nolint:gosec // small
	binary.BigEndian.PutUint16(ip[4:], uint16(i+1))                       //nolint:gosec // small
	ip[8] = 64                                                            // TTL
	ip[9] = 17                                                            // UDP
	src4, dst4 := src.As4(), netip.MustParseAddr(captureRemoteIPv4).As4()
	copy(ip[12:16], src4[:])
	copy(ip[16:20], dst4[:])
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))

	udp := b[ethLen+ipLen:]
	binary.BigEndian.PutUint16(udp[0:], uint16(40000+i)) //nolint:gosec // small
	binary.BigEndian.PutUint16(udp[2:], captureUDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen+len(payload))) //nolint:gosec // small
	// UDP checksum 0: not computed, allowed over IPv4
	copy(udp[udpLen:], payload)

	return b
}

// ipv4Checksum is the ones' complement sum of the header's 16-bit words (checksum field zero).
func ipv4Checksum(hdr []byte) uint16 {
	var sum uint32

	for i := 0; i+1 < len(hdr); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(hdr[i:]))
	}

	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}

	return ^uint16(sum)
}
