// Package talostest is a fake talos.Dialer for reconciler unit tests: nodes
// whose state a test sets and reads, and sessions that refuse what a real
// node refuses (a maintenance session meets an installed node's
// certificate, a configured one a node in maintenance mode, and every one a
// node that resets). Calls a fake session does not implement panic, so a
// test notices a call it did not expect.
package talostest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"ichor.dev/ichor/pkg/talos"
)

// Node is one node's state, as Talos keeps it. Its Nodename is
// "node-" + UUID. Change it only while no session is in use (between
// reconciles), or under the Dialer's lock.
type Node struct {
	UUID      string
	Installed bool   // out of maintenance mode, serving its cluster's certificate
	Config    []byte // the config it runs
	// Stage is maintenance, installing, running, booting, rebooting,
	// resetting or off (powered off: until a test turns it on, calls fail
	// as with a node that does not answer).
	Stage string
	Etcd  bool // a control plane that runs an etcd member
	// DBSize and DBSizeInUse are its etcd member's database sizes.
	DBSize, DBSizeInUse int64
	// Boots counts the boots Boot finished; the boot ID names the count.
	Boots int
	// TalosVersion is the version the node runs; empty reads v1.13.0.
	TalosVersion string
	// Staged is a version an upgrade installed; the next boot runs it.
	Staged string
	// Schematic is the Image Factory schematic of the image the node
	// booted; an upgrade to a factory's installer stages its own.
	Schematic, stagedSchematic string
	// RefuseUpgrade, when set, makes the installer exit 1 saying it.
	RefuseUpgrade string
	// NeverBoots keeps the node from coming back from a reboot.
	NeverBoots bool
	// DrainPolls is how many Boot calls a graceful shutdown drains the node
	// (stage "shutting down") before it powers off; a second shutdown
	// meanwhile takes over and starts the drain again, as Talos's does.
	DrainPolls int
	drainLeft  int
	// Quota is the etcd member's backend quota: while DBSize exceeds it,
	// the etcd cluster has a NOSPACE alarm for it once raised. 0: no quota.
	Quota int64
	// NoSpace is the raised NOSPACE alarm of this member, until disarmed.
	NoSpace bool
	// SecureBoot is what the node says of its boot: a signed UKI under
	// firmware that enforces SecureBoot.
	SecureBoot bool
	// Unanswered fails the next that many reboot and reset calls as a node
	// that did not answer (gRPC Unavailable); AnswerLost says whether the
	// node took them (its answer was lost on the way back) or never got
	// them.
	Unanswered int
	AnswerLost bool
	// APIServerConfigVersion is the version of a control plane's
	// APIServerConfig resource; a test moves it as Talos does when a
	// change reaches kube-apiserver.
	APIServerConfigVersion string
	// APIServerConfigFilesVersion is that of its configuration files
	// (ConfigStatus static-pods); "" for none.
	APIServerConfigFilesVersion string
	// KeySlots are the LUKS2 key slots of the node's STATE and EPHEMERAL
	// (modelled as one) when its config encrypts them. Every boot opens
	// them with the first configured slot they hold, then syncs them with
	// the config as Talos does: OpenedWith is that slot, VolumeError why
	// no slot opened them (the boot then stops, stage "booting").
	KeySlots    []int
	OpenedWith  *int
	VolumeError string
	// FailKeySync, when set, makes the sync after opening fail with it:
	// the slots stay as they were, and the volumes' status says so.
	FailKeySync string
	failedSyncs []string
	// next is a config applied with a reboot: the next boot runs it.
	next []byte
	// Calls logs what was asked of the node: "maintenance-apply",
	// "apply <mode>", "reset graceful=<bool>", "bootstrap", "reboot
	// force=<bool>", "shutdown force=<bool>", "etcd-defrag", "pull <image>", "upgrade <image>",
	// "forfeit-leadership".
	Calls []string
}

// Dialer hands out sessions with its Nodes by address, as talos.Machinery
// does with real nodes.
type Dialer struct {
	mu    sync.Mutex
	Nodes map[string]*Node
}

func (d *Dialer) node(address string) (*Node, error) {
	n, ok := d.Nodes[address]
	if !ok {
		return nil, fmt.Errorf("dial %s: connection refused", address)
	}
	return n, nil
}

func (d *Dialer) Maintenance(_ context.Context, address string, _ talos.Pin) (talos.Node, error) {
	n, err := d.node(address)
	return &session{d: d, n: n, maintenance: true, address: address}, err
}

func (d *Dialer) Configured(_ context.Context, address string, _ talos.Credentials) (talos.Node, error) {
	n, err := d.node(address)
	return &session{d: d, n: n, address: address}, err
}

// session is a session with a fake node; calls it does not fake panic
// (the embedded nil Node), so a test notices a call it did not expect.
type session struct {
	talos.Node
	d           *Dialer
	n           *Node
	maintenance bool
	address     string
}

// refused is what a session of the wrong kind meets: a maintenance session
// the installed node's certificate, a configured one the maintenance API;
// and any session a node that resets.
func (s *session) refused() error {
	switch s.n.Stage {
	case "resetting":
		return fmt.Errorf("dial %s: connection refused", s.address)
	case "off":
		return status.Errorf(codes.Unavailable, "connection error: dial tcp %s: connect: connection refused", s.address)
	}
	if s.maintenance && s.n.Installed {
		return &talos.FingerprintMismatchError{Address: s.address, Pinned: "(pinned)", Presented: "ypeBEsobvcr6wjGzmiPcTaeG7/gUfE5yuYB3ha/uSLs="}
	}
	if !s.maintenance && !s.n.Installed {
		return errors.New("tls: the node asks for no client certificate (maintenance mode)")
	}
	return nil
}

func (s *session) Close() error { return nil }
