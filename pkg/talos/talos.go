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
	"errors"
	"io"
	"net/netip"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	// ApplyConfiguration sends a complete machine config. A node in
	// maintenance mode installs it and boots into it whatever mode says; a
	// configured node takes it as mode says.
	ApplyConfiguration(ctx context.Context, config []byte, mode ApplyMode) (*ApplyResult, error)
	// Status reads the node's machine stage, readiness and node name.
	Status(ctx context.Context) (*Status, error)
	// Security reads how the node says it booted (its SecurityState), in
	// maintenance mode too; nil when it does not say.
	Security(ctx context.Context) (*Security, error)
	// Config reads the machine config the node runs now (not one staged for
	// its next boot). It holds the cluster's secrets; callers must never log
	// or store it.
	Config(ctx context.Context) ([]byte, error)
	// BootstrapManifest reads the objects of one of a control plane's
	// bootstrap manifests, by the name `talosctl get manifests` lists
	// (ManifestKubeProxy), or nil when the node renders none of that name.
	// Manifests may hold secrets (the bootstrap token's): read only the one
	// needed, and never log them.
	BootstrapManifest(ctx context.Context, id string) ([]*unstructured.Unstructured, error)
	// Identity reads who the node is, as Talos knows it: the addresses it
	// gives the kubelet, its node name and hostname.
	Identity(ctx context.Context) (*Identity, error)
	// Bootstrap starts etcd on a control plane as the cluster's first member.
	// It returns ErrAlreadyBootstrapped when the node (or cluster) has etcd
	// data already, which callers treat as done.
	Bootstrap(ctx context.Context) error
	// EtcdMembers lists the members of the node's etcd cluster.
	EtcdMembers(ctx context.Context) ([]EtcdMember, error)
	// EtcdSnapshot streams a snapshot of the node's etcd database, as
	// `talosctl etcd snapshot` saves it. The caller closes the stream; the
	// session must stay open until then.
	EtcdSnapshot(ctx context.Context) (io.ReadCloser, error)
	// SupportBundle writes a zip archive of the node's version, services,
	// logs, kernel log and main resources to w, as far as os:reader can
	// read them.
	SupportBundle(ctx context.Context, w io.Writer) error
	// PacketCapture streams a pcap capture of one link for pc.Duration (or
	// until ctx ends); the stream ends with io.EOF when the time is up. A
	// link the node does not have is ErrNoSuchLink. The caller closes the
	// stream; the session must stay open until then.
	PacketCapture(ctx context.Context, pc PacketCapture) (io.ReadCloser, error)
	// BootID reads the kernel's boot ID, which changes at every boot: how
	// `talosctl reboot --wait` tells that a node rebooted.
	BootID(ctx context.Context) (string, error)
	// Reboot asks the node to reboot; force skips draining Kubernetes and
	// stopping services gracefully. A node already in a reboot or another
	// sequence drops the request, so asking twice reboots once.
	Reboot(ctx context.Context, force bool) error
	// Shutdown asks the node to power off, as `talosctl shutdown` does:
	// Talos cordons and drains the node first (and uncordons it when it
	// boots again) unless force. The node stays off until someone powers it
	// on; a node already in another sequence drops the request.
	Shutdown(ctx context.Context, force bool) error
	// EtcdStatus reads the status of the node's own etcd member.
	EtcdStatus(ctx context.Context) (*EtcdStatus, error)
	// EtcdDefragment defragments the node's own etcd member, which answers
	// nothing else meanwhile.
	EtcdDefragment(ctx context.Context) error
	// Reset wipes what r says and reboots the node, as `talosctl reset
	// --reboot` does: into maintenance mode when its config went with the
	// wipe, into its config otherwise.
	Reset(ctx context.Context, r ResetRequest) error
	// EtcdLeave removes the node's member from its etcd cluster; the node's
	// etcd stays stopped until its next boot.
	EtcdLeave(ctx context.Context) error
	// WipeEtcdData wipes etcd's data without leaving etcd or draining, and
	// reboots the node into the config it runs, as Talos's
	// disaster-recovery guide does: the node's ETCD volume where it is a
	// partition of its own (Talos v1.14, given a VolumeConfig), else the
	// EPHEMERAL partition it is a directory of (with the kubelet's state).
	WipeEtcdData(ctx context.Context) error
	// EtcdRecover uploads an etcd snapshot, as `talosctl bootstrap
	// --recover-from` does, for BootstrapRecover to restore.
	EtcdRecover(ctx context.Context, snapshot io.Reader) error
	// BootstrapRecover bootstraps etcd on a control plane with an empty
	// etcd from the snapshot EtcdRecover uploaded. ErrAlreadyBootstrapped:
	// its etcd has data.
	BootstrapRecover(ctx context.Context) error
	// RestartService restarts one of the node's services, as `talosctl
	// service ID restart` does.
	RestartService(ctx context.Context, id string) error
	// EtcdAlarms lists the alarms raised in the node's etcd cluster.
	EtcdAlarms(ctx context.Context) ([]string, error)
	// EtcdDisarmAlarms disarms every alarm of the node's etcd cluster and
	// returns those it disarmed. etcd raises NOSPACE again at the next write
	// while a member is still over its quota.
	EtcdDisarmAlarms(ctx context.Context) ([]string, error)
	// Version reads the Talos version the node runs (v1.13.0).
	Version(ctx context.Context) (string, error)
	// Schematic reads the ID of the Image Factory schematic the node
	// booted, from the extension the factory puts in every image it builds
	// (Talos v1.14 also shows it as its ImageFactorySchematic resource);
	// "" for an image no factory built.
	Schematic(ctx context.Context) (string, error)
	// APIServerVersions reads the versions of what shapes a control
	// plane's kube-apiserver, which its static pod carries once it runs
	// them, as `talosctl upgrade-k8s` checks the first. Zero on a node
	// without kube-apiserver (a worker).
	APIServerVersions(ctx context.Context) (APIServerVersions, error)
	// TalosCA reads the node's Talos API trust, as talosctl rotate-ca
	// does: from its OSRoot resource, which only os:admin may read.
	TalosCA(ctx context.Context) (*TalosCA, error)
	// Volume reads how the node's last boot prepared a volume (STATE,
	// EPHEMERAL), from its VolumeStatus; ErrNoVolume when it has none.
	Volume(ctx context.Context, id string) (*Volume, error)
	// PullImage pulls an image into the node's system containerd.
	PullImage(ctx context.Context, ref string) error
	// Upgrade runs the installer of image, pulled first, which writes the
	// new Talos version to the system disk; the node runs it after its next
	// reboot. An installer that exits non-zero is an *InstallerError.
	// Nodes before v1.13 do not serve it (codes.Unimplemented).
	Upgrade(ctx context.Context, image string) error
	// UpgradeLegacy is Upgrade for nodes before v1.13: the node installs
	// image and reboots into it by itself.
	UpgradeLegacy(ctx context.Context, image string) error
	// ForfeitEtcdLeadership has the node's etcd member hand leadership to
	// another member, if it leads.
	ForfeitEtcdLeadership(ctx context.Context) error
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
	// Transport is the bus it is on (sata, nvme, virtio, usb, ...), when known.
	Transport string
}

// ApplyMode is how a configured node takes a new config.
type ApplyMode int

const (
	// ApplyNoReboot applies the config to the running node; the node
	// refuses it if a field changed that needs a reboot.
	ApplyNoReboot ApplyMode = iota
	// ApplyReboot stages the config and reboots the node gracefully into it.
	ApplyReboot
)

func (m ApplyMode) String() string {
	if m == ApplyReboot {
		return "reboot"
	}
	return "no-reboot"
}

// ApplyResult is the node's answer to an applied config.
type ApplyResult struct {
	// Rebooting is true when the node reboots to take the config.
	Rebooting bool
	// Details is the node's own description of what it did.
	Details string
	// Warnings are the node's validation warnings.
	Warnings []string
}

// Status is a node's machine stage and readiness.
type Status struct {
	// Stage is Talos's machine stage: "running", "booting", "rebooting", …
	Stage string
	// Ready is true when the node reports no unmet readiness condition.
	Ready bool
	// Unmet names the unmet readiness conditions, if any.
	Unmet []string
	// Nodename is the name the node's kubelet registers with.
	Nodename string
	// Security is how the node says it booted (its SecurityState); nil
	// when it does not say.
	Security *Security
}

// Security is how a node says it booted.
type Security struct {
	SecureBoot, BootedWithUKI, ModuleSignatureEnforced bool
	PCRSigningKeyFingerprint                           string
}

// Running is true for a node in stage running that reports itself ready.
func (s *Status) Running() bool { return s.Stage == "running" && s.Ready }

// Identity is a node's identity as its own Talos API reports it, which a
// compromised kubelet cannot change (unlike its Node object).
type Identity struct {
	// Nodename is the name the kubelet registers with (Nodename resource).
	Nodename string
	// Hostname and FQDN are the node's hostname (HostnameStatus resource).
	Hostname, FQDN string
	// KubeletAddresses are the addresses Talos gives the kubelet as
	// --node-ip (NodeIP resource "kubelet").
	KubeletAddresses []netip.Addr
}

// EtcdMember is one member of a control plane's etcd cluster.
type EtcdMember struct {
	// ID is the member ID, as talosctl prints it (hex).
	ID string
	// Hostname is the member's name (its node's hostname).
	Hostname string
	// Learner is true for a member that does not vote yet.
	Learner bool
}

// EtcdStatus is what one etcd member reports about itself.
type EtcdStatus struct {
	// MemberID is the member's ID, as talosctl prints it (hex).
	MemberID string
	// DBSize is the size of the member's database file, and DBSizeInUse
	// the part of it that holds data; defragmenting frees the rest.
	DBSize, DBSizeInUse int64
	// Leader is the ID (hex) of the member this one follows as leader.
	Leader string
	// Errors are the member's alarms and errors, as etcd words them.
	Errors []string
}

// WipeMode is which disks a reset wipes, as Talos defines its modes.
type WipeMode int

const (
	// WipeAll wipes the system disk and the user disks the request names.
	WipeAll WipeMode = iota
	// WipeSystemDisk wipes the system disk only.
	WipeSystemDisk
	// WipeUserDisks wipes only the user disks the request names; the
	// system, its config and etcd's data stay.
	WipeUserDisks
)

// TalosCA is a node's Talos API trust: the CA that issues its API
// certificate, and every CA it accepts client certificates from (its
// machine.ca among them), as PEM certificates. Never a key. A worker's
// Issuing is empty: its config holds the certificate of machine.ca without
// the key, and its API certificate comes from a control plane's trustd.
type TalosCA struct {
	Issuing  []byte
	Accepted [][]byte
}

// Volume is how a node's boot prepared one of its volumes.
type Volume struct {
	// Phase is the volume's (ready, failed, …).
	Phase string
	// Encrypted: LUKS2 encrypts it.
	Encrypted bool
	// OpenedWithSlot is the key slot whose key opened it; nil when it is
	// not encrypted or did not open.
	OpenedWithSlot *int
	// FailedSyncs are the key slots Talos could not bring in line with
	// its config after it opened the volume, each saying why.
	FailedSyncs []string
	// Error is why a failed volume failed.
	Error string
	// Type is how it is backed: partition, directory, …
	Type string
}

// APIServerVersions are the versions a control plane's kube-apiserver
// static pod carries once it runs what its node's config says.
type APIServerVersions struct {
	// Config is the APIServerConfig resource's version (its flags, image,
	// environment): the pod's talos.dev/config-version.
	Config string
	// ConfigFiles is the version of the configuration files Talos renders
	// for it (admission, audit, authorization and, from v1.14,
	// authentication), the ConfigStatus static-pods resource's: the pod's
	// talos.dev/config-file-version. A change of these alone restarts
	// kube-apiserver with the same Config. "" when the node has none.
	ConfigFiles string
}

// PromotedVolumes are the system volumes Talos v1.14 keeps as directories
// on EPHEMERAL unless a VolumeConfig gives them a partition of their own:
// a wipe of EPHEMERAL wipes them only as directories.
var PromotedVolumes = []string{"ETCD", "CRI", "KUBELET", "LOG"}

// ErrNoVolume: the node has no such volume.
var ErrNoVolume = errors.New("the node has no such volume")

// ResetRequest is what a Reset wipes, in talosctl reset's terms.
type ResetRequest struct {
	// Graceful drains the node and, on a control plane, leaves etcd first.
	Graceful bool
	Mode     WipeMode
	// SystemLabels, when set, wipe only these system volumes (STATE,
	// EPHEMERAL) instead of the whole system disk (--system-labels-to-wipe).
	// With EPHEMERAL go the PromotedVolumes the node keeps on partitions of
	// their own, as they would with it as directories.
	SystemLabels []string
	// UserDisks are the user disks to wipe (--user-disks-to-wipe).
	UserDisks []string
}

// ResetToMaintenance is the reset of a machine that leaves its cluster:
// graceful, STATE and EPHEMERAL only, so the node comes back in
// maintenance mode with its other volumes kept.
var ResetToMaintenance = ResetRequest{Graceful: true, SystemLabels: []string{"STATE", "EPHEMERAL"}}

// ErrAlreadyBootstrapped is Bootstrap's answer for a node or cluster whose
// etcd has data already.
var ErrAlreadyBootstrapped = errors.New("etcd is already bootstrapped")

// NotAnswering reports whether err says the node's API did not answer at
// all (a connection refused, reset or timed out), as a powered-off node's
// does, as opposed to an answer that refused the call, or a peer whose
// certificate or protocol was refused (gRPC reports those as Unavailable
// too; only the message tells them apart).
func NotAnswering(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable:
		msg := err.Error()
		return !strings.Contains(msg, "x509:") && !strings.Contains(msg, "certificate") && !strings.Contains(msg, "tls: ")
	case codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}
