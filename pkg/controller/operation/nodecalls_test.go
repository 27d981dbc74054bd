package operation

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/talos/talostest"
)

// callDialer is the fixture's talostest dialer with the calls talostest
// leaves to the simulator, faked over the same nodes for the etcd-restore
// and node-reset tests: the etcd-restore calls, a node's identity, the
// wipe mode of a reset, and the certificate a maintenance session accepts.
// It logs, in order and across nodes, every call that changes a node.
type callDialer struct {
	*talostest.Dialer
	// log is every call that changes a node, "<machine> <call>", in order.
	log []string
	// epoch names the etcd cluster: 0 the one before the restore, and one
	// more at each bootstrap from a snapshot. member is the epoch of the
	// etcd each node's member belongs to, by address.
	epoch  int
	member map[string]int
	// wiped are the addresses of nodes whose etcd data a wipe took: back,
	// their etcd joins whatever etcd cluster runs (join).
	wiped map[string]bool
	// uploaded is the snapshot a recovery received.
	uploaded []byte
	// resets are the reset requests the nodes accepted, by machine.
	resets map[string][]talos.ResetRequest
}

func newCallDialer(f *fixture) *callDialer {
	d := &callDialer{Dialer: f.dialer, member: map[string]int{}, wiped: map[string]bool{}, resets: map[string][]talos.ResetRequest{}}
	f.r.Dialer = d
	return d
}

func machineAt(address string) string { return strings.TrimSuffix(address, ":50000") }

func (d *callDialer) Configured(ctx context.Context, address string, creds talos.Credentials) (talos.Node, error) {
	n, err := d.Dialer.Configured(ctx, address, creds)
	if err != nil {
		return nil, err
	}
	return &callSession{Node: n, d: d, address: address}, nil
}

// Maintenance sessions accept the certificate the node presents, one per
// system UUID.
func (d *callDialer) Maintenance(ctx context.Context, address string, pin talos.Pin) (talos.Node, error) {
	n, err := d.Dialer.Maintenance(ctx, address, pin)
	if err != nil {
		return nil, err
	}
	return &callSession{Node: n, d: d, address: address, maintenance: true}, nil
}

// certFingerprint is the SPKI fingerprint of the maintenance certificate
// of the node with system UUID uuid.
func certFingerprint(uuid string) string {
	sum := sha256.Sum256([]byte(uuid))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// join has every node back from a wipe of its etcd data join the etcd
// cluster that runs, if one does, as Talos's etcd service does: the fixture
// calls it between reconciles.
func (d *callDialer) join() {
	running := -1
	for address, n := range d.Nodes {
		if n.Etcd && n.Stage == "running" {
			running = d.member[address]
		}
	}
	if running < 0 {
		return
	}
	for address, n := range d.Nodes {
		if d.wiped[address] && n.Stage == "running" && !n.Etcd {
			n.Etcd, d.member[address] = true, running
		}
	}
}

type callSession struct {
	talos.Node
	d           *callDialer
	address     string
	maintenance bool
}

func (s *callSession) node() *talostest.Node { return s.d.Nodes[s.address] }

// reach fails as talostest's session does with a node that does not take
// calls now (resetting, off, or of the wrong kind).
func (s *callSession) reach(ctx context.Context) error {
	_, err := s.Node.Status(ctx)
	return err
}

func (s *callSession) did(call string) {
	n := s.node()
	n.Calls = append(n.Calls, call)
	s.d.log = append(s.d.log, machineAt(s.address)+" "+call)
}

func (s *callSession) Fingerprint() string {
	if !s.maintenance {
		return ""
	}
	return certFingerprint(s.node().UUID)
}

func (s *callSession) Identity(ctx context.Context) (*talos.Identity, error) {
	if err := s.reach(ctx); err != nil {
		return nil, err
	}
	name := "node-" + s.node().UUID
	return &talos.Identity{Nodename: name, Hostname: name}, nil
}

func (s *callSession) EtcdLeave(ctx context.Context) error {
	if err := s.reach(ctx); err != nil {
		return err
	}
	n := s.node()
	if !n.Etcd {
		return errors.New("etcd is not running on this node")
	}
	s.did("etcd-leave")
	n.Etcd = false
	delete(s.d.member, s.address)
	return nil
}

// WipeEtcdData wipes EPHEMERAL and reboots; the node stays away for one
// more Boot than a reboot takes (NeverBoots, which the restore fixture
// clears once it looked at the budget), so that a step follows it while it
// is away.
func (s *callSession) WipeEtcdData(ctx context.Context) error {
	if err := s.reach(ctx); err != nil {
		return err
	}
	n := s.node()
	s.did("wipe-etcd")
	n.Etcd, n.Stage, n.NeverBoots = false, "rebooting", true
	s.d.wiped[s.address] = true
	delete(s.d.member, s.address)
	return nil
}

func (s *callSession) EtcdRecover(ctx context.Context, r io.Reader) error {
	if err := s.reach(ctx); err != nil {
		return err
	}
	if s.node().Etcd {
		return errors.New("etcd is running: a snapshot is recovered only into a node whose etcd waits for it")
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.did("etcd-recover")
	s.d.uploaded = data
	return nil
}

func (s *callSession) BootstrapRecover(ctx context.Context) error {
	if err := s.reach(ctx); err != nil {
		return err
	}
	n := s.node()
	if n.Etcd {
		return talos.ErrAlreadyBootstrapped
	}
	if s.d.uploaded == nil {
		return errors.New("no snapshot was uploaded to recover from")
	}
	s.did("bootstrap-recover")
	s.d.epoch++
	n.Etcd, s.d.member[s.address] = true, s.d.epoch
	return nil
}

func (s *callSession) RestartService(ctx context.Context, service string) error {
	if err := s.reach(ctx); err != nil {
		return err
	}
	s.did("restart " + service)
	return nil
}

// Reset records the request; a reset of user disks only reboots the node
// into its config, the others are talostest's (back in maintenance mode).
func (s *callSession) Reset(ctx context.Context, r talos.ResetRequest) error {
	if err := s.reach(ctx); err != nil {
		return err
	}
	n := s.node()
	if r.Mode != talos.WipeUserDisks {
		before := len(n.Calls)
		err := s.Node.Reset(ctx, r)
		if len(n.Calls) > before {
			s.d.log = append(s.d.log, machineAt(s.address)+" "+n.Calls[len(n.Calls)-1])
			s.d.resets[machineAt(s.address)] = append(s.d.resets[machineAt(s.address)], r)
		}
		return err
	}
	s.did(fmt.Sprintf("reset graceful=%v", r.Graceful))
	s.d.resets[machineAt(s.address)] = append(s.d.resets[machineAt(s.address)], r)
	if n.Stage == "running" {
		n.Stage = "rebooting"
	}
	return nil
}

// calls are the logged calls of machine, in order.
func (d *callDialer) calls(machine string) []string {
	var out []string
	for _, c := range d.log {
		if rest, ok := strings.CutPrefix(c, machine+" "); ok {
			out = append(out, rest)
		}
	}
	return out
}
