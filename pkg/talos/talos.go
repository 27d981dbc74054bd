// Package talos is the one place ichor-controller talks to Talos nodes. It
// names the handful of calls the controller makes (Dialer and Node) and
// implements them with the Talos machinery client (Machinery), which is what
// both real nodes and the test simulator answer.
//
// Trust in maintenance mode: a node without a config serves a self-signed
// certificate, so there is no CA to verify it against. A session either
// observes the certificate on first contact (and from then on accepts only
// that one), or accepts only a fingerprint pinned earlier, the way
// `talosctl --cert-fingerprint` does. Nothing is sent to a node before its
// handshake passed that check. A configured node is reached with mutual TLS
// against its cluster's Talos CA instead.
package talos

import (
	"context"
	"net/netip"
)

// Dialer opens sessions with Talos nodes. Machinery implements it with the
// real Talos client; reconcilers depend on this interface only.
type Dialer interface {
	// Maintenance opens a session with a node's maintenance-mode API at
	// address (host:port) that accepts only the certificates pin allows.
	// Connections are made lazily, by the first call.
	Maintenance(ctx context.Context, address string, pin Pin) (Node, error)
	// Configured opens a session with a configured node at address over
	// mutual TLS: the node must present a certificate issued by the
	// cluster's Talos CA, and the session presents the controller's own
	// client certificate (os:admin, minted from the cluster's bundle).
	Configured(ctx context.Context, address string, creds Credentials) (Node, error)
}

// Credentials are what a session with a configured node trusts and presents.
// They come from a cluster's secrets bundle and are never logged.
type Credentials struct {
	// CA is the PEM certificate of the cluster's Talos API CA.
	CA []byte
	// Certificate and Key are the PEM client certificate and its key.
	Certificate, Key []byte
}

// Node is one session with a node's Talos API. It is not safe for
// concurrent use; Close it when done.
type Node interface {
	// Facts reads the node's Talos version and hardware facts.
	Facts(ctx context.Context) (*Facts, error)
	// Fingerprint is the SPKI fingerprint of the certificate the node
	// presented, in talosctl's --cert-fingerprint form; empty until a call
	// has completed a handshake.
	Fingerprint() string
	// Close ends the session.
	Close() error
}

// Facts are what a node reports about itself before it is configured.
type Facts struct {
	// TalosVersion is the version tag the node runs (v1.13.0).
	TalosVersion string
	// UUID is the SMBIOS system UUID; empty when the firmware reports none.
	UUID string
	// Serial is the SMBIOS system serial number.
	Serial string
	// Disks are the node's block devices that could hold an installation:
	// CD-ROMs are left out. Sorted by path.
	Disks []Disk
	// Addresses are the addresses of the node's links other than loopback,
	// link-local and host-scoped ones. Sorted.
	Addresses []netip.Prefix
}

// Disk is one block device of a node.
type Disk struct {
	// Path is the device path (/dev/sda).
	Path string
	// SizeBytes is the device size.
	SizeBytes uint64
	// Model and Serial are what the device reports.
	Model, Serial string
}
