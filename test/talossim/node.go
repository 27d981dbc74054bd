// Package talossim simulates a Talos Linux node's API (apid + machined) closely enough that the real
// machinery client cannot tell it apart for the calls it implements: maintenance mode with a pinned
// self-signed certificate, mutual TLS with role-based authorization once configured, the read-only COSI
// resource API, ApplyConfiguration with its install/reboot/try/staged semantics, the lifecycle calls
// (Reboot, Shutdown, Reset, Upgrade), a shared simulated etcd cluster (Bootstrap and the Etcd* calls),
// PacketCapture, and the calls a support bundle reads (services, logs, dmesg, containers, events,
// kubeconfig). Faults (unreachable, slow, impostor, crash) can be switched per node at run time.
package talossim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// Phase is the lifecycle stage of a simulated node.
type Phase string

// Phases a simulated node goes through.
const (
	// PhaseMaintenance: no complete config yet; the API serves a self-signed cert and readers only.
	PhaseMaintenance Phase = "maintenance"
	// PhaseInstalling: a config was applied in maintenance and the node is installing to disk; the API
	// already serves mutual TLS for that config.
	PhaseInstalling Phase = "installing"
	// PhaseRebooting: the node is rebooting and its API is down.
	PhaseRebooting Phase = "rebooting"
	// PhaseRunning: the node booted from its installed config and serves mutual TLS.
	PhaseRunning Phase = "running"
	// PhaseUpgrading: an Upgrade is installing the new version; the API stays up until the reboot.
	PhaseUpgrading Phase = "upgrading"
	// PhaseShuttingDown: a graceful Shutdown drains the node; the API and the kubelet stay up until it
	// powers off.
	PhaseShuttingDown Phase = "shuttingdown"
	// PhaseResetting: a Reset is wiping the node; the API is down.
	PhaseResetting Phase = "resetting"
	// PhaseShutdown: the node is powered off (Shutdown, or Reset without reboot); the API is down until
	// PowerOn.
	PhaseShutdown Phase = "shutdown"
)

// acceptRetryDelay is the pause after a failed Accept (e.g. out of file descriptors) before retrying.
const acceptRetryDelay = 10 * time.Millisecond

// ErrStopped is returned by waits on a node that has been stopped.
var ErrStopped = errors.New("talossim: node stopped")

// errNodeStopped is what an API call racing with Stop gets, like a call to a powered-off machine.
var errNodeStopped = status.Error(codes.Unavailable, "node is stopped")

// Node is one simulated Talos machine with its API listener.
type Node struct {
	opts     Options
	ln       net.Listener
	listenIP netip.Addr
	st       state.State
	certs    serverCertCache
	etcd     *EtcdCluster // Options.Etcd, or a cluster of this node alone
	events   *eventLog

	// applyMu serializes ApplyConfiguration calls end to end.
	applyMu sync.Mutex

	mu        sync.Mutex
	phase     Phase
	history   []PhaseChange
	changed   chan struct{} // closed and replaced on every phase change
	installed bool
	active    config.Provider // running config (MachineConfig "v1alpha1")
	persisted config.Provider // config used at next boot (MachineConfig "persistent")
	rollback  *time.Timer     // pending TRY-mode revert
	sequence  bool            // an install, upgrade, reset or reboot sequence is in progress
	// controlPlaneOf is the endpoint of the cluster the node runs as a control plane of, "" when none.
	controlPlaneOf string
	// apiServerKey is what shaped kube-apiserver in the config this control plane ran last
	// (kubernetes_apiserver.go).
	apiServerKey string
	seqGen       uint64     // bumped by every sequence start; steps of a superseded sequence give up
	api          *apiServer // current apid instance; nil while the API is down
	stopped      bool
	maint        *maintenanceIdentity // replaced when a Reset wipes the config
	bootTime     time.Time
	bootID       string // the kernel's boot ID, new at every boot
	sw           software
	// images are the image references pulled into the node's containerd (ImageService.Pull).
	images map[string]bool
	// lifecycleBusy is true while a LifecycleService install or upgrade runs.
	lifecycleBusy bool
	// unattended is the UnattendedInstallStatus of a v1.14 install from an UnattendedInstallConfig, nil
	// without one (install.go).
	unattended *runtime.UnattendedInstallStatusSpec
	etcdLocal  etcdLocal
	lastReset  *machine.ResetRequest
	diskWipes  map[string]int // user disk path → wipes (reset.go)
	faults     faultState     // run-time fault injection (faults.go)
	kubelet    *kubelet       // the running simulated kubelet, nil when none runs (kubelet.go)
	// kubeletCerts are the kubelet's certificates in /var/lib/kubelet (the KUBELET volume, on EPHEMERAL
	// unless promoted); nil once wiped.
	kubeletCerts *kubeletCerts
	// volumes are STATE, EPHEMERAL and the volumes in it as the last boot prepared them (volumes.go,
	// volumes_system.go).
	volumes map[string]*systemVolume

	// faultsMu serializes SetFaults calls; taken before mu.
	faultsMu sync.Mutex

	stopCh chan struct{}
	wg     sync.WaitGroup
}

// Start brings up a node in maintenance mode listening on opts.ListenAddress.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if opts.ListenAddress == "" {
		opts.ListenAddress = "127.0.0.1:0"
	}

	ln, err := net.Listen("tcp", opts.ListenAddress)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", opts.ListenAddress, err)
	}

	n, err := newNode(ctx, ln, opts)
	if err != nil {
		ln.Close() //nolint:errcheck

		return nil, err
	}

	n.wg.Go(n.acceptLoop)

	return n, nil
}

// newNode prepares node state, identity and the first (maintenance) API instance on ln.
func newNode(ctx context.Context, ln net.Listener, opts Options) (*Node, error) {
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil {
		return nil, fmt.Errorf("parsing listen address %s: %w", ln.Addr(), err)
	}

	listenIP := ap.Addr().Unmap()

	if opts, err = opts.withDefaults(listenIP); err != nil {
		return nil, err
	}

	st, err := newResourceState(ctx)
	if err != nil {
		return nil, err
	}

	if err = publishHardware(ctx, st, opts); err != nil {
		return nil, err
	}

	bootID, err := randomUUID()
	if err != nil {
		return nil, err
	}

	n := &Node{
		bootID:   bootID,
		opts:     opts,
		ln:       ln,
		listenIP: listenIP,
		st:       st,
		etcd:     opts.Etcd,
		events:   newEventLog(opts.SystemUUID),
		changed:  make(chan struct{}),
		stopCh:   make(chan struct{}),
		bootTime: time.Now(),
		sw:       software{running: opts.Version},
	}

	if n.etcd == nil {
		n.etcd = &EtcdCluster{}
	}

	n.maint, err = newMaintenanceIdentity(n.certIPs(true), []string{opts.Hostname})
	if err != nil {
		return nil, err
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	if err = n.setPhaseLocked(PhaseMaintenance); err != nil {
		return nil, err
	}

	n.api = n.newAPIServer(true)
	n.etcd.attach(n)

	return n, nil
}

// Stop shuts the node down: listener, API instances, pending timers and sequences.
func (n *Node) Stop() {
	n.mu.Lock()

	if n.stopped {
		n.mu.Unlock()

		return
	}

	n.stopped = true
	close(n.stopCh)
	n.dropRecoveryLocked()

	if n.rollback != nil {
		n.rollback.Stop()
		n.rollback = nil
	}

	n.retire(n.api)
	n.api = nil
	n.syncKubeletLocked() // stopped: winds the kubelet down; wg.Wait below waits for it
	imp := n.stopFaultsLocked()
	n.mu.Unlock()

	imp.stop()
	n.etcd.detach(n)
	n.ln.Close() //nolint:errcheck
	n.wg.Wait()
}

// Addr returns the host:port the node's API listens on.
func (n *Node) Addr() string {
	return n.ln.Addr().String()
}

// MaintenanceFingerprint returns the maintenance certificate's SPKI fingerprint in talosctl's
// --cert-fingerprint form, so clients can pin the node before it has a config.
// The fingerprint changes when a Reset wipes the node's config, like a freshly booted machine's.
func (n *Node) MaintenanceFingerprint() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.maint.fingerprint
}

// Phase returns the node's current lifecycle phase.
func (n *Node) Phase() Phase {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.phase
}

// PhaseChange is the node entering a phase.
type PhaseChange struct {
	Phase Phase
	At    time.Time
}

// PhaseHistory returns every phase the node entered, oldest first, so tests can assert on transitions
// that happen too quickly to observe with Phase.
func (n *Node) PhaseHistory() []Phase {
	n.mu.Lock()
	defer n.mu.Unlock()

	phases := make([]Phase, len(n.history))
	for i, c := range n.history {
		phases[i] = c.Phase
	}

	return phases
}

// PhaseChanges returns every phase the node entered with when (the simulator's monotonic clock), oldest
// first, so that tests can tell whether two nodes were away at the same time without sampling.
func (n *Node) PhaseChanges() []PhaseChange {
	n.mu.Lock()
	defer n.mu.Unlock()

	return slices.Clone(n.history)
}

// WaitPhase blocks until the node is in phase p, ctx is done, or the node is stopped.
func (n *Node) WaitPhase(ctx context.Context, p Phase) error {
	for {
		n.mu.Lock()
		cur, changed, stopped := n.phase, n.changed, n.stopped
		n.mu.Unlock()

		switch {
		case cur == p:
			return nil
		case stopped:
			return ErrStopped
		}

		select {
		case <-changed:
		case <-n.stopCh:
		case <-ctx.Done():
			return fmt.Errorf("waiting for phase %s (now %s): %w", p, cur, ctx.Err())
		}
	}
}

// setPhaseLocked records a phase change (with its machine status event), wakes waiters and republishes
// the derived resources.
func (n *Node) setPhaseLocked(p Phase) error {
	if n.phase != p {
		n.phase = p
		n.history = append(n.history, PhaseChange{Phase: p, At: time.Now()})
		close(n.changed)
		n.changed = make(chan struct{})
		n.events.add(machineStatusEvent(p), "")
	}

	return n.publishLocked()
}

// publishLocked writes phase- and config-derived resources to the COSI state, and brings the kubelet in
// line with the node's phase and config.
func (n *Node) publishLocked() error {
	n.syncKubeletLocked()
	n.followAPIServerLocked()

	if n.configuredLocked() && n.phase == PhaseRunning {
		n.opts.Trustd.offer(n.active.Machine().Security().IssuingCA())
	}

	var kubelet *kubeletSpec
	if n.kubelet != nil {
		kubelet = &n.kubelet.spec
	}

	return publishDynamic(context.Background(), n.st, nodeView{
		kubelet:      kubelet,
		phase:        n.phase,
		hostname:     n.hostnameLocked(),
		active:       n.active,
		persisted:    n.persisted,
		version:      n.sw.running,
		image:        n.sw.runningImage,
		etcdMemberID: n.etcdLocal.memberID,
		volumes:      n.volumeStatusesLocked(),
		unattended:   n.unattended,
	})
}

// hostnameLocked returns the hostname from the active config, or the node's own default.
func (n *Node) hostnameLocked() string {
	if n.active != nil {
		if hc := n.active.NetworkHostnameConfig(); hc != nil && hc.Hostname() != "" {
			return hc.Hostname()
		}
	}

	return n.opts.Hostname
}

// configuredLocked reports whether the active config is complete for boot (i.e. not in maintenance mode).
func (n *Node) configuredLocked() bool {
	return n.active != nil && n.active.CompleteForBoot()
}

// certIPs returns the IPs the API server certificate must carry: the listen IP and node addresses, plus
// loopback in maintenance mode.
func (n *Node) certIPs(maintenance bool) []netip.Addr {
	ips := []netip.Addr{n.listenIP}

	for _, p := range n.opts.Addresses {
		ips = append(ips, p.Addr())
	}

	if maintenance {
		ips = append(ips, netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback())
	}

	return uniqueAddrs(ips)
}

// tlsConfig returns the listener's TLS config, which picks maintenance or configured settings per handshake.
func (n *Node) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		GetConfigForClient: n.configForClient,
	}
}

// configForClient chooses the server TLS settings for one handshake from the node's current state.
func (n *Node) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	n.mu.Lock()
	phase, configured, active, hostname, maint := n.phase, n.configuredLocked(), n.active, n.hostnameLocked(), n.maint
	n.mu.Unlock()

	switch {
	case apiDownPhases[phase]:
		return nil, fmt.Errorf("node is %s", phase)
	case !configured:
		return maint.tlsConfig(), nil
	}

	// Options.OSCA stands for the trustd of one cluster; a node that joined
	// another asks that cluster's control planes, through Options.Trustd.
	osCA := n.opts.OSCA
	if issuing := active.Machine().Security().IssuingCA(); issuing != nil && len(issuing.Key) == 0 &&
		(osCA == nil || string(osCA.Crt) != string(issuing.Crt)) {
		osCA = n.opts.Trustd.lookup(issuing.Crt)
	}

	cfg, err := n.certs.configuredTLSConfig(configuredTLSInput{
		cfg:      active,
		osCA:     osCA,
		ips:      n.certIPs(false),
		hostname: hostname,
	})
	if err != nil {
		return nil, fmt.Errorf("building API TLS config: %w", err)
	}

	return cfg, nil
}

// apiDownPhases are the phases in which the node serves no API at all.
var apiDownPhases = map[Phase]bool{PhaseRebooting: true, PhaseResetting: true, PhaseShutdown: true}

// acceptLoop hands each raw connection to the current API instance (or the impostor, see Faults), drops it
// while the API is down and resets it while the node is Unreachable.
func (n *Node) acceptLoop() {
	for {
		c, err := n.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}

			if !n.delay(acceptRetryDelay) {
				return
			}

			continue
		}

		n.mu.Lock()
		unreachable := n.faults.set.Unreachable
		conn, lis := n.routeConnLocked(c)
		n.mu.Unlock()

		switch {
		case unreachable:
			resetConn(c)
		case lis == nil:
			c.Close() //nolint:errcheck
		case !lis.deliver(conn):
			conn.Close() //nolint:errcheck
		}
	}
}
