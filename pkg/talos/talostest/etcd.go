package talostest

import (
	"context"
	"errors"
	"io"
	"slices"

	"ichor.dev/ichor/pkg/talos"
)

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
