package talossim

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/version"
)

// Faults are failure modes switched on a running node with SetFaults, so that tests can drive a client
// through the failure paths of a real fleet. The zero value is a healthy node. Faults survive reboots
// (including the ones a crash causes) and stay until replaced by SetFaults or ClearFaults.
type Faults struct {
	// Unreachable makes the node's address behave like a powered-off host or a network partition: new
	// connections are reset right after they are accepted and established ones are cut, so callers get
	// Unavailable. The node itself keeps running: its phase, config, identity and background sequences
	// are untouched, and once cleared it answers again with the same certificate.
	// It takes precedence over Impostor.
	Unreachable bool

	// Slow delays every call to the node's API (unary calls, and streams before they start) by this long
	// before it is handled. A caller whose deadline passes first gets DeadlineExceeded, as from an
	// overloaded real node; a call whose node reboots or stops meanwhile gets Unavailable.
	Slow time.Duration

	// Impostor puts another machine on the node's address: new connections reach a maintenance-mode
	// impostor with its own freshly generated self-signed certificate, so a client pinning the node's
	// MaintenanceFingerprint fails the TLS handshake. The impostor accepts ApplyConfiguration like any
	// maintenance node but never applies the config; ImpostorConfigs records what it received. Switching
	// the impostor on or off cuts established connections (the address changed hands); clearing it gives
	// the address back to the real node, whose state and fingerprint are unchanged. Every switch-on
	// generates a new impostor identity. Slow and the crash faults act on the real node only.
	Impostor bool

	// CrashCalls is how many upcoming calls (matching CrashMethod) crash the node: such a call is
	// received, then every connection to the node's API is reset without an answer (the caller sees
	// Unavailable) and the node reboots as a crashed machine would: PhaseRebooting, then back up after
	// Options.RebootDelay, running from its installed config or in maintenance mode without one. The call
	// itself has no effect (an ApplyConfiguration that crashes leaves the config as it was), and a
	// sequence in progress (install, upgrade, reset, reboot) is abandoned. Each crash decrements
	// CrashCalls; Faults reports what is left.
	CrashCalls int

	// CrashMethod restricts CrashCalls to calls of one method: a full gRPC method name
	// ("/machine.MachineService/ApplyConfiguration") or just its last element ("ApplyConfiguration").
	// Empty: any call.
	CrashMethod string

	// KubeletServingExtraIPs are IP SANs the node's simulated kubelet adds to every serving certificate
	// request it makes from now on (e.g. another node's IP), like a compromised or misconfigured kubelet.
	KubeletServingExtraIPs []netip.Addr

	// KubeletServingExtraDNSNames are DNS SANs the simulated kubelet adds to its serving certificate
	// requests from now on.
	KubeletServingExtraDNSNames []string

	// UpgradeFails makes the installer of every upgrade (LifecycleService.Upgrade, MachineService.Upgrade,
	// a staged upgrade at boot) fail, saying this, as an installer that cannot write the system disk
	// does: it exits 1, or 7 if it is of Talos v1.14 or later (installer.go). Nothing is installed.
	UpgradeFails string

	// InstallerFails maps installer image references to the error their installer fails with, as
	// UpgradeFails does, wherever the node runs it: an upgrade, or the install from maintenance mode.
	// The map is not copied: do not change it after SetFaults.
	InstallerFails map[string]string

	// NeverBoots makes the node's next reboots end powered off instead of booting, like hardware that does
	// not come back: the API stays down until PowerOn.
	NeverBoots bool
}

// matchesCrash reports whether a call of the full gRPC method name is subject to CrashMethod.
func (f Faults) matchesCrash(fullMethod string) bool {
	return f.CrashMethod == "" || f.CrashMethod == fullMethod || strings.HasSuffix(fullMethod, "/"+f.CrashMethod)
}

// faultState is the node's fault switches and the machinery behind them; guarded by Node.mu (SetFaults
// calls are serialized by Node.faultsMu).
type faultState struct {
	set      Faults
	impostor *impostor
	received [][]byte // configs the impostors were given, oldest first
	conns    connSet
	changed  chan struct{} // closed by the next SetFaults; made when something waits for it
}

// faultsChangedLocked returns a channel closed by the next SetFaults.
func (n *Node) faultsChangedLocked() <-chan struct{} {
	if n.faults.changed == nil {
		n.faults.changed = make(chan struct{})
	}

	return n.faults.changed
}

// SetFaults replaces the node's faults with f (see Faults for each one's effect). It returns ErrStopped
// after Stop, or an error if an impostor identity cannot be generated (the faults are then unchanged).
func (n *Node) SetFaults(f Faults) error {
	if f.CrashCalls < 0 {
		return fmt.Errorf("talossim: negative CrashCalls %d", f.CrashCalls)
	}

	n.faultsMu.Lock()
	defer n.faultsMu.Unlock()

	n.mu.Lock()
	needImpostor := f.Impostor && n.faults.impostor == nil
	n.mu.Unlock()

	var ident *maintenanceIdentity

	if needImpostor {
		var err error

		// generated outside Node.mu: key generation must not stall the node's API
		if ident, err = newMaintenanceIdentity(n.certIPs(true), []string{n.opts.Hostname}); err != nil {
			return fmt.Errorf("creating impostor identity: %w", err)
		}
	}

	n.mu.Lock()

	if n.stopped {
		n.mu.Unlock()

		return ErrStopped
	}

	old := n.faults.set
	n.faults.set = f

	if n.faults.changed != nil {
		close(n.faults.changed)
		n.faults.changed = nil
	}

	var retired *impostor

	switch {
	case ident != nil:
		n.faults.impostor = n.newImpostorLocked(ident)
	case !f.Impostor:
		retired, n.faults.impostor = n.faults.impostor, nil
	}

	if (f.Unreachable && !old.Unreachable) || f.Impostor != old.Impostor {
		n.faults.conns.cut(nil)
	}

	n.mu.Unlock()

	retired.stop()

	return nil
}

// ClearFaults returns the node to health: it is SetFaults(Faults{}).
func (n *Node) ClearFaults() {
	if err := n.SetFaults(Faults{}); err != nil && !errors.Is(err, ErrStopped) {
		log.Printf("talossim: clearing faults: %v", err)
	}
}

// Faults returns the node's current faults; CrashCalls is what is left after crashes so far.
func (n *Node) Faults() Faults {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.faults.set
}

// ImpostorConfigs returns copies of the configs ApplyConfiguration delivered to impostors of this node
// (Faults.Impostor), oldest first, including after the impostor was cleared; none of them was applied.
func (n *Node) ImpostorConfigs() [][]byte {
	n.mu.Lock()
	defer n.mu.Unlock()

	out := make([][]byte, len(n.faults.received))
	for i, b := range n.faults.received {
		out[i] = append([]byte(nil), b...)
	}

	return out
}

// routeConnLocked picks the destination of an accepted connection: the impostor, the current API
// instance, or none (Unreachable, or the API is down). The connection is registered under Node.mu, so a
// later switch of faults is guaranteed to cut it.
func (n *Node) routeConnLocked(c net.Conn) (net.Conn, *chanListener) {
	switch {
	case n.faults.set.Unreachable:
		return nil, nil
	case n.faults.impostor != nil:
		return n.faults.conns.add(c, true), n.faults.impostor.lis
	case n.api != nil:
		return n.faults.conns.add(c, false), n.api.lis
	default:
		return nil, nil
	}
}

// callFaults applies the call-level faults to a call of fullMethod received by API instance a: the Slow
// delay, then a pending crash. A nil result lets the call proceed; otherwise the call fails with it.
func (n *Node) callFaults(ctx context.Context, a *apiServer, fullMethod string) error {
	n.mu.Lock()
	slow := n.faults.set.Slow
	n.mu.Unlock()

	if slow > 0 {
		t := time.NewTimer(slow)
		defer t.Stop()

		select {
		case <-t.C:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-a.down:
			return errAPIDown
		case <-n.stopCh:
			return errNodeStopped
		}
	}

	n.mu.Lock()

	f := &n.faults.set
	crash := f.CrashCalls > 0 && f.matchesCrash(fullMethod) && !n.stopped && n.api == a

	if crash {
		f.CrashCalls--
		n.crashLocked()
	}

	n.mu.Unlock()

	if !crash {
		return nil
	}

	// The connection is gone, so nothing this call returns reaches the caller; hold it until gRPC has
	// torn the stream down so no handler runs.
	select {
	case <-ctx.Done():
	case <-n.stopCh:
	}

	return errAPIDown
}

// crashLocked is the node's API process dying mid-call: every API connection is reset, any running
// sequence is abandoned and the machine reboots.
func (n *Node) crashLocked() {
	gen := n.beginSequenceLocked()

	if err := n.enterRebootLocked(); err != nil {
		log.Printf("talossim: entering reboot after crash: %v", err)
	}

	n.faults.conns.cut(func(impostor bool) bool { return !impostor })
	n.wg.Go(func() { n.finishReboot(gen) })
}

// stopFaultsLocked detaches the impostor at Stop; the caller stops it once Node.mu is released.
func (n *Node) stopFaultsLocked() *impostor {
	imp := n.faults.impostor
	n.faults.impostor = nil
	n.faults.conns.cut(nil)

	return imp
}

// connSet tracks the node's accepted connections so faults can cut them; it has its own lock because
// gRPC closes connections from its own goroutines.
type connSet struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

// add registers c (bound for the impostor or the real API) and returns the wrapper to hand to gRPC.
func (s *connSet) add(c net.Conn, impostor bool) *trackedConn {
	tc := &trackedConn{Conn: c, set: s, impostor: impostor}

	s.mu.Lock()
	defer s.mu.Unlock()

	if s.conns == nil {
		s.conns = make(map[*trackedConn]struct{})
	}

	s.conns[tc] = struct{}{}

	return tc
}

// cut resets every tracked connection that match selects (all when nil).
func (s *connSet) cut(match func(impostor bool) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()

	for tc := range s.conns {
		if match == nil || match(tc.impostor) {
			delete(s.conns, tc)
			resetConn(tc.Conn)
		}
	}
}

// trackedConn is an accepted connection registered in a connSet until it is closed.
type trackedConn struct {
	net.Conn

	set      *connSet
	impostor bool
}

// Close implements net.Conn, unregistering the connection.
func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.conns, c)
	c.set.mu.Unlock()

	return c.Conn.Close()
}

// resetConn closes c abortively (TCP RST where possible), so the peer sees "connection reset by peer".
func resetConn(c net.Conn) {
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) //nolint:errcheck // best effort: a plain close is an acceptable fallback
	}

	c.Close() //nolint:errcheck
}

// impostor is another machine in maintenance mode answering on the node's address (Faults.Impostor).
type impostor struct {
	gs      *grpc.Server
	lis     *chanListener
	stopped chan struct{}
}

// newImpostorLocked starts an impostor serving ident; its configs are recorded on n.
func (n *Node) newImpostorLocked(ident *maintenanceIdentity) *impostor {
	imp := &impostor{lis: newChanListener(n.ln.Addr()), stopped: make(chan struct{})}

	imp.gs = grpc.NewServer(
		grpc.Creds(credentials.NewTLS(ident.tlsConfig())),
		grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize),
	)

	machine.RegisterMachineServiceServer(imp.gs, &impostorServer{node: n})

	n.wg.Go(func() {
		defer close(imp.stopped)

		_ = imp.gs.Serve(imp.lis) //nolint:errcheck // Serve only returns once the impostor is stopped
	})

	return imp
}

// stop shuts the impostor down, cutting its connections; nil-safe.
func (imp *impostor) stop() {
	if imp == nil {
		return
	}

	imp.gs.Stop()
	<-imp.stopped
}

// impostorServer is the impostor's MachineService: enough of a maintenance-mode node to take a config.
type impostorServer struct {
	machine.UnimplementedMachineServiceServer

	node *Node
}

// Version answers like a maintenance-mode node of the simulated version.
func (s *impostorServer) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	info := version.NewVersion()
	info.Tag = s.node.opts.Version

	return &machine.VersionResponse{Messages: []*machine.Version{{
		Version:  info,
		Platform: &machine.PlatformInfo{Name: "metal", Mode: "metal"},
	}}}, nil
}

// ApplyConfiguration accepts a loadable config like a maintenance-mode node and records it on the real
// node (ImpostorConfigs) without applying it anywhere.
func (s *impostorServer) ApplyConfiguration(_ context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	if _, err := configloader.NewFromBytes(in.GetData()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	mode := in.GetMode()
	if mode == machine.ApplyConfigurationRequest_REBOOT || mode == machine.ApplyConfigurationRequest_AUTO {
		mode = machine.ApplyConfigurationRequest_NO_REBOOT
	}

	details := detailsNoReboot
	if mode == machine.ApplyConfigurationRequest_STAGED {
		details = detailsStaged
	}

	if !in.GetDryRun() {
		n := s.node

		n.mu.Lock()
		n.faults.received = append(n.faults.received, append([]byte(nil), in.GetData()...))
		n.mu.Unlock()
	}

	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
		Mode:        mode,
		ModeDetails: details,
	}}}, nil
}
