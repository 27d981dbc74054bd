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
	"io"
	"slices"
	"strings"
	"sync"

	"ichor.dev/ichor/pkg/render"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/talosdocs"
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

func (s *session) Facts(context.Context) (*talos.Facts, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	return &talos.Facts{TalosVersion: "v1.13.0", UUID: s.n.UUID}, nil
}

func (s *session) ApplyConfiguration(_ context.Context, config []byte, mode talos.ApplyMode) (*talos.ApplyResult, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	if s.maintenance {
		s.n.Calls = append(s.n.Calls, "maintenance-apply")
		s.n.Installed, s.n.Config, s.n.Stage = true, config, "installing"
		return &talos.ApplyResult{Rebooting: true, Details: "installing"}, nil
	}
	s.n.Calls = append(s.n.Calls, "apply "+mode.String())
	if mode == talos.ApplyReboot {
		// As on Talos, the config runs from the next boot on.
		s.n.next, s.n.Stage = config, "rebooting"
		return &talos.ApplyResult{Rebooting: true, Details: "rebooting"}, nil
	}
	s.n.Config = config
	return &talos.ApplyResult{Details: "applied"}, nil
}

func (s *session) Status(context.Context) (*talos.Status, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	return &talos.Status{Stage: s.n.Stage, Ready: s.n.Stage == "running", Nodename: "node-" + s.n.UUID}, nil
}

func (s *session) Config(context.Context) ([]byte, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	return slices.Clone(s.n.Config), nil
}

// BootstrapManifest renders, from the node's config, the kube-proxy
// DaemonSet of a control plane's "10-kube-proxy" manifest (its image is
// cluster.proxy.image); no other manifest.
func (s *session) BootstrapManifest(_ context.Context, id string) ([]*unstructured.Unstructured, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	cfg, err := talosdocs.Load(s.n.Config)
	if err != nil {
		return nil, err
	}
	if id != talos.ManifestKubeProxy || cfg.Machine().Type() != machine.TypeControlPlane || !cfg.Cluster().Proxy().Enabled() {
		return nil, nil
	}
	ds := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "DaemonSet",
		"metadata":   map[string]any{"name": "kube-proxy", "namespace": "kube-system"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "kube-proxy", "image": cfg.Cluster().Proxy().Image()}},
		}}},
	}}
	return []*unstructured.Unstructured{ds}, nil
}

func (s *session) Reset(_ context.Context, r talos.ResetRequest) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	if err := s.callLost(true); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, fmt.Sprintf("reset graceful=%v", r.Graceful))
	s.n.Stage = "resetting"
	return s.callLost(false)
}

// callLost is the error of a reboot or reset call that meets Unanswered:
// asked before the node acts (before), it fails a call the node never got;
// after, one whose answer was lost (AnswerLost).
func (s *session) callLost(before bool) error {
	if s.n.Unanswered == 0 || before == s.n.AnswerLost {
		return nil
	}
	s.n.Unanswered--
	return status.Errorf(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: EOF\" (%s)", s.address)
}

// EtcdMembers lists every node of the dialer that runs etcd (etcd true), as
// a member named for its node.
func (s *session) EtcdMembers(context.Context) ([]talos.EtcdMember, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	var members []talos.EtcdMember
	for _, n := range s.d.Nodes {
		if n.Etcd {
			members = append(members, talos.EtcdMember{ID: n.UUID, Hostname: "node-" + n.UUID})
		}
	}
	return members, nil
}

func (s *session) Close() error { return nil }

func (s *session) Bootstrap(context.Context) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, "bootstrap")
	if s.n.Etcd {
		return talos.ErrAlreadyBootstrapped
	}
	s.n.Etcd = true
	return nil
}

// Boot makes every installing or rebooting node run its config, and every
// resetting one come back in maintenance mode.
func (d *Dialer) Boot() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.Nodes {
		switch n.Stage {
		case "installing", "rebooting":
			if n.NeverBoots {
				continue
			}
			n.Boots++
			if n.next != nil {
				n.Config, n.next = n.next, nil
			}
			if n.Staged != "" {
				n.TalosVersion, n.Staged = n.Staged, ""
			}
			n.Stage = "running"
			if !n.prepareVolumes() {
				n.Stage = "booting"
			}
		case "resetting":
			n.Stage, n.Installed, n.Config, n.next, n.Etcd = "maintenance", false, nil, nil, false
			n.KeySlots, n.OpenedWith, n.VolumeError, n.failedSyncs = nil, nil, "", nil
		case "shutting down":
			if n.drainLeft--; n.drainLeft <= 0 {
				n.Stage = "off"
			}
		}
	}
}

func (s *session) BootID(context.Context) (string, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s-boot-%d", s.n.UUID, s.n.Boots), nil
}

// Reboot starts a reboot that Boot finishes; a node in another sequence
// (not running) drops the request, as Talos's sequencer does.
func (s *session) Reboot(_ context.Context, force bool) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	if err := s.callLost(true); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, fmt.Sprintf("reboot force=%v", force))
	if s.n.Stage == "running" {
		s.n.Stage = "rebooting"
	}
	return s.callLost(false)
}

// Shutdown powers the node off (stage off): at once when forced or without
// DrainPolls, otherwise after draining for DrainPolls Boot calls. Like
// Talos's, it takes over whatever runs, a draining shutdown too.
func (s *session) Shutdown(_ context.Context, force bool) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, fmt.Sprintf("shutdown force=%v", force))
	if force || s.n.DrainPolls == 0 {
		s.n.Stage = "off"
		return nil
	}
	s.n.Stage, s.n.drainLeft = "shutting down", s.n.DrainPolls
	return nil
}

func (s *session) EtcdStatus(context.Context) (*talos.EtcdStatus, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	if !s.n.Etcd {
		return nil, errors.New("etcd is not running on this node")
	}
	st := &talos.EtcdStatus{MemberID: s.n.UUID, DBSize: s.n.DBSize, DBSizeInUse: s.n.DBSizeInUse}
	for _, n := range s.d.Nodes {
		if n.NoSpace {
			st.Errors = append(st.Errors, "memberID:"+n.UUID+" alarm:NOSPACE")
		}
	}
	return st, nil
}

func (s *session) EtcdDefragment(context.Context) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	if !s.n.Etcd {
		return errors.New("etcd is not running on this node")
	}
	s.n.Calls = append(s.n.Calls, "etcd-defrag")
	s.n.DBSize = s.n.DBSizeInUse
	return nil
}

func (s *session) Security(context.Context) (*talos.Security, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	return &talos.Security{SecureBoot: s.n.SecureBoot, BootedWithUKI: s.n.SecureBoot, ModuleSignatureEnforced: true}, nil
}

func (s *session) APIServerConfigVersion(context.Context) (string, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return "", err
	}
	return s.n.APIServerConfigVersion, nil
}

// configuredKeySlots are the key slots n's config names for STATE, in
// order; nil when it does not encrypt it.
func (n *Node) configuredKeySlots() []int {
	slots, err := render.ConfiguredDiskKeySlots(n.Config)
	if err != nil {
		return nil
	}
	return slots["STATE"]
}

// prepareVolumes opens (or, new, formats) the node's encrypted volumes at
// a boot and syncs their key slots; false when no configured slot opens
// them.
func (n *Node) prepareVolumes() bool {
	configured := n.configuredKeySlots()
	n.OpenedWith, n.VolumeError, n.failedSyncs = nil, "", nil
	if configured == nil {
		return true
	}
	if n.KeySlots == nil {
		n.KeySlots = slices.Clone(configured)
	}
	for _, slot := range configured {
		if slices.Contains(n.KeySlots, slot) {
			n.OpenedWith = &slot
			break
		}
	}
	if n.OpenedWith == nil {
		n.VolumeError = fmt.Sprintf("no handlers available to get encryption keys from: slots %v hold none of %v", n.KeySlots, configured)
		return false
	}
	if n.FailKeySync != "" {
		n.failedSyncs = []string{n.FailKeySync}
		return true
	}
	n.KeySlots = slices.Clone(configured)
	return true
}

// Volume reports STATE and EPHEMERAL as the last boot prepared them.
func (s *session) Volume(_ context.Context, id string) (*talos.Volume, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	if (id != "STATE" && id != "EPHEMERAL") || !s.n.Installed {
		return nil, fmt.Errorf("volume %s: %w", id, talos.ErrNoVolume)
	}
	v := &talos.Volume{Phase: "ready"}
	switch {
	case s.n.VolumeError != "":
		v.Phase, v.Error, v.Encrypted = "failed", s.n.VolumeError, true
	case s.n.OpenedWith != nil:
		slot := *s.n.OpenedWith
		v.Encrypted, v.OpenedWithSlot, v.FailedSyncs = true, &slot, slices.Clone(s.n.failedSyncs)
	}
	return v, nil
}

// TalosCA reads the trust of the config the node runs, as Talos's OSRoot
// has it: machine.ca issues, and is accepted with machine.acceptedCAs.
func (s *session) TalosCA(context.Context) (*talos.TalosCA, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	cfg, err := configloader.NewFromBytes(s.n.Config)
	if err != nil {
		return nil, fmt.Errorf("the node's config: %w", err)
	}
	sec := cfg.Machine().Security()
	out := &talos.TalosCA{}
	if ca := sec.IssuingCA(); ca != nil {
		out.Accepted = [][]byte{ca.Crt}
		if len(ca.Key) > 0 { // a worker's holds the certificate only, which OSRoot leaves out
			out.Issuing = ca.Crt
		}
	}
	for _, ca := range sec.AcceptedCAs() {
		out.Accepted = append(out.Accepted, ca.Crt)
	}
	return out, nil
}

func (s *session) Version(context.Context) (string, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return "", err
	}
	if s.n.TalosVersion == "" {
		return "v1.13.0", nil
	}
	return s.n.TalosVersion, nil
}

func (s *session) PullImage(_ context.Context, ref string) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, "pull "+ref)
	return nil
}

// Upgrade stages the version of the image's tag for the next boot.
func (s *session) Upgrade(_ context.Context, image string) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, "upgrade "+image)
	if s.n.RefuseUpgrade != "" {
		return &talos.InstallerError{ExitCode: 1, Output: []string{s.n.RefuseUpgrade}}
	}
	s.n.Staged = image[strings.LastIndexByte(image, ':')+1:]
	return nil
}

func (s *session) ForfeitEtcdLeadership(context.Context) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, "forfeit-leadership")
	return nil
}

// EtcdAlarms lists the NOSPACE alarms of every node of the dialer.
func (s *session) EtcdAlarms(context.Context) ([]string, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	var out []string
	for _, n := range s.d.Nodes {
		if n.NoSpace {
			out = append(out, "NOSPACE on member "+n.UUID)
		}
	}
	slices.Sort(out)
	return out, nil
}

// EtcdDisarmAlarms clears every alarm; a member still over its quota raises NOSPACE again.
func (s *session) EtcdDisarmAlarms(ctx context.Context) ([]string, error) {
	alarms, err := s.EtcdAlarms(ctx)
	if err != nil {
		return nil, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.n.Calls = append(s.n.Calls, "etcd-disarm")
	for _, n := range s.d.Nodes {
		n.NoSpace = n.Quota > 0 && n.DBSize > n.Quota
	}
	return alarms, nil
}

// EtcdLeave, WipeEtcdData, EtcdRecover, BootstrapRecover and RestartService
// are not faked: the simulator tests the etcd-restore that calls them.

func (s *session) EtcdLeave(context.Context) error { panic("talostest: EtcdLeave is not faked") }

func (s *session) WipeEtcdData(context.Context) error { panic("talostest: WipeEtcdData is not faked") }

func (s *session) EtcdRecover(context.Context, io.Reader) error {
	panic("talostest: EtcdRecover is not faked")
}

func (s *session) BootstrapRecover(context.Context) error {
	panic("talostest: BootstrapRecover is not faked")
}

func (s *session) RestartService(context.Context, string) error {
	panic("talostest: RestartService is not faked")
}
