package talos

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// Machinery is the Dialer over the Talos machinery client: the same gRPC
// calls and COSI reads talosctl makes.
type Machinery struct{}

var _ Dialer = Machinery{}

// Maintenance implements Dialer.
func (Machinery) Maintenance(ctx context.Context, address string, pin Pin) (Node, error) {
	v := newVerifier(address, pin)
	c, err := client.New(ctx, client.WithEndpoints(address), client.WithTLSConfig(v.tlsConfig()), client.WithGRPCDialOptions(observed...))
	if err != nil {
		return nil, fmt.Errorf("create Talos client for %s: %w", address, err)
	}
	return &machineryNode{c: c, v: v}, nil
}

// Configured implements Dialer.
func (Machinery) Configured(ctx context.Context, address string, creds Credentials) (Node, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(creds.CA) {
		return nil, fmt.Errorf("connect to %s: no CA certificate in the credentials", address)
	}
	cert, err := tls.X509KeyPair(creds.Certificate, creds.Key)
	if err != nil {
		// The error of X509KeyPair names no key material.
		return nil, fmt.Errorf("connect to %s: client certificate: %w", address, err)
	}
	v := newRecorder(address)
	cfg := &tls.Config{
		MinVersion:       tls.VersionTLS12,
		RootCAs:          pool,
		Certificates:     []tls.Certificate{cert},
		VerifyConnection: v.verify,
	}
	c, err := client.New(ctx, client.WithEndpoints(address), client.WithTLSConfig(cfg), client.WithGRPCDialOptions(observed...))
	if err != nil {
		return nil, fmt.Errorf("create Talos client for %s: %w", address, err)
	}
	return &machineryNode{c: c, v: v}, nil
}

// machineryNode is one session over a machinery client.
type machineryNode struct {
	c *client.Client
	v *verifier
}

func (n *machineryNode) Fingerprint() string { return n.v.fingerprint() }

func (n *machineryNode) Close() error { return n.c.Close() }

// Facts reads what `talosctl version`, `get systeminformation`, `get disks`
// and `get addresses` show.
func (n *machineryNode) Facts(ctx context.Context) (*Facts, error) {
	var f Facts

	ver, err := n.c.Version(ctx)
	if err != nil {
		return nil, n.v.explain("read Talos version", err)
	}
	if msgs := ver.GetMessages(); len(msgs) > 0 {
		f.TalosVersion = msgs[0].GetVersion().GetTag()
	}

	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, n.c.COSI, hardware.SystemInformationID)
	if err != nil {
		return nil, n.v.explain("read system information", err)
	}
	f.UUID, f.Serial = si.TypedSpec().UUID, si.TypedSpec().SerialNumber

	disks, err := safe.StateListAll[*block.Disk](ctx, n.c.COSI)
	if err != nil {
		return nil, n.v.explain("list disks", err)
	}
	for d := range disks.All() {
		s := d.TypedSpec()
		if s.CDROM || s.Readonly || s.DevPath == "" {
			continue // nothing is installed on or wiped from these
		}
		f.Disks = append(f.Disks, Disk{Path: s.DevPath, SizeBytes: s.Size, Model: s.Model, Serial: s.Serial, Transport: s.Transport})
	}
	slices.SortFunc(f.Disks, func(a, b Disk) int { return cmp.Compare(a.Path, b.Path) })

	addrs, err := safe.StateListAll[*network.AddressStatus](ctx, n.c.COSI)
	if err != nil {
		return nil, n.v.explain("list addresses", err)
	}
	for a := range addrs.All() {
		if s := a.TypedSpec(); reportable(s) {
			f.Addresses = append(f.Addresses, s.Address)
		}
	}
	slices.SortFunc(f.Addresses, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	f.Addresses = slices.Compact(f.Addresses)

	// The calls passed the pin check, but a mismatch on a later reconnect
	// would make the facts a mix of two machines.
	if m := n.v.mismatchErr(); m != nil {
		return nil, m
	}
	return &f, nil
}

// reportable is true for an address that says where a node is: not on the
// loopback link, not host-scoped, not link-local.
func reportable(s *network.AddressStatusSpec) bool {
	addr := s.Address.Addr()
	return s.Address.IsValid() && s.LinkName != "lo" && s.Scope != nethelpers.ScopeHost &&
		!addr.IsLinkLocalUnicast() && !addr.IsLinkLocalMulticast()
}
