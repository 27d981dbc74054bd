package talossim

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/siderolabs/crypto/x509"
)

// DefaultVersion is the Talos version tag a simulated node reports unless Options.Version says otherwise.
const DefaultVersion = "v1.13.0"

// defaultDiskSize is the size of the disk a node gets when Options.Disks is empty (10 GiB).
const defaultDiskSize = 10 * 1024 * 1024 * 1024

// Disk describes a block device the simulated node reports as a Disks.block.talos.dev resource.
type Disk struct {
	// Path is the device path, e.g. /dev/sda; its base name is the resource ID.
	Path string
	// Size is the disk size in bytes.
	Size uint64
	// Model is the disk model string.
	Model string
	// Serial is the disk serial number.
	Serial string
	// Transport is the bus the disk is on, as Talos reports it (sata, nvme, virtio, usb); empty: unknown.
	Transport string
}

// Options configures a simulated node; zero values are replaced by the defaults documented per field.
type Options struct {
	// ListenAddress is where the Talos API (apid) listens; default 127.0.0.1:0.
	ListenAddress string
	// Hostname is the maintenance-mode hostname; default talos-xxx-yyy derived from SystemUUID.
	Hostname string
	// SystemUUID is the SMBIOS system UUID; default random.
	SystemUUID string
	// SystemSerial is the SMBIOS system serial number.
	SystemSerial string
	// Disks are the node's block devices; default a single 10 GiB /dev/sda.
	Disks []Disk
	// Addresses are the addresses on link eth0; default the listen IP as a host prefix.
	Addresses []netip.Prefix
	// HardwareAddr is eth0's MAC address; default a locally administered MAC derived from SystemUUID.
	HardwareAddr net.HardwareAddr
	// SecureBoot makes the node report that it booted a SecureBoot UKI under firmware that enforces
	// SecureBoot (its SecurityState); default a node booted without.
	SecureBoot bool
	// Version is the Talos version tag the node reports; default DefaultVersion.
	Version string
	// InstallDelay is how long the node stays in PhaseInstalling after a config is applied in maintenance.
	InstallDelay time.Duration
	// UpgradeDelay is how long the node stays in PhaseUpgrading (API up) during an Upgrade.
	UpgradeDelay time.Duration
	// Registry is what ImageService.Pull can pull; nil serves every installer image whose tag is a Talos
	// version.
	Registry *Registry
	// PullDelay is how long ImageService.Pull takes to download an image the node does not have yet;
	// an image it has is not downloaded again, as containerd does not.
	PullDelay time.Duration
	// RebootDelay is how long the node stays in PhaseRebooting (API down), and how long it takes to boot
	// after PowerOn.
	RebootDelay time.Duration
	// ResetDelay is how long a Reset's sequence runs with the API up (after the drain of a graceful
	// one) before its stopAllServices task takes the API down for the wipe: a real node's first stops its
	// pods, leaves etcd and unmounts its volumes. Zero: the API goes down as the Reset call returns.
	ResetDelay time.Duration
	// Etcd is the simulated etcd cluster the node's etcd member belongs to once it is a control plane;
	// control planes of one cluster must share it. Default: a cluster of this node alone.
	Etcd *EtcdCluster
	// Kubernetes is the real Kubernetes control plane of the node's cluster, started when a control plane
	// of the cluster is bootstrapped; all nodes of one cluster must share it. With it set, a configured
	// node runs a simulated kubelet against the cluster endpoint (see Kubernetes and kubelet.go). Nil: no
	// Kubernetes, no kubelet.
	Kubernetes *Kubernetes
	// KubeletPort is the port the simulated kubelet serves HTTPS on, at the node's first address;
	// default 0, a free port (the Node object's status reports it). Real nodes use 10250.
	KubeletPort int
	// OSCA is the Talos API CA with its key, used like trustd would when the applied config's machine.ca
	// has no key (worker configs) and is this certificate; a config of another cluster's CA is served
	// through Trustd.
	OSCA *x509.PEMEncodedCertificateAndKey
	// Trustd is shared by the nodes of one cluster (or several): configured control planes offer their
	// Talos API CA through it, and workers whose machine.ca is not OSCA get their API certificate from it. Nil: only
	// OSCA serves a worker.
	Trustd *Trustd
}

// withDefaults returns a copy of o with every unset field filled in; listenIP is the bound listener IP.
func (o Options) withDefaults(listenIP netip.Addr) (Options, error) {
	if o.SystemUUID == "" {
		id, err := randomUUID()
		if err != nil {
			return o, fmt.Errorf("generating system UUID: %w", err)
		}

		o.SystemUUID = id
	}

	seed := sha256.Sum256([]byte(o.SystemUUID))

	if o.Hostname == "" {
		h := hex.EncodeToString(seed[:])
		o.Hostname = "talos-" + h[0:3] + "-" + h[3:6]
	}

	if len(o.Disks) == 0 {
		o.Disks = []Disk{{Path: "/dev/sda", Size: defaultDiskSize, Model: "QEMU HARDDISK", Serial: "talossim-" + hex.EncodeToString(seed[6:10])}}
	}

	for i, d := range o.Disks {
		if d.Path == "" || filepath.Base(d.Path) == "." || filepath.Base(d.Path) == "/" {
			return o, fmt.Errorf("disk %d: invalid path %q", i, d.Path)
		}
	}

	if len(o.Addresses) == 0 && listenIP.IsValid() && !listenIP.IsUnspecified() {
		o.Addresses = []netip.Prefix{netip.PrefixFrom(listenIP, listenIP.BitLen())}
	}

	if len(o.HardwareAddr) == 0 {
		mac := make(net.HardwareAddr, 6)
		copy(mac, seed[10:16])
		mac[0] = (mac[0] | 0x02) &^ 0x01 // locally administered, unicast
		o.HardwareAddr = mac
	}

	if o.Version == "" {
		o.Version = DefaultVersion
	}

	return o, nil
}

// randomUUID returns a random RFC 4122 version 4 UUID string.
func randomUUID() (string, error) {
	var b [16]byte

	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}

	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80

	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
