package operation

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// etcdQuorumWithout decides, from etcd itself, whether the cluster keeps
// its quorum while this step's control plane is away: the members are read
// from the other control planes, each of which must answer its own member
// status without an error (an alarm, a lost leader), and the healthy voters
// other than this one must be a majority of all voters. Talos v1.13's
// LifecycleService.Upgrade checks none of this, so Ichor does, before every
// control plane. A cluster of one control plane has no quorum to keep: its
// etcd is down while it reboots, as with talosctl. It returns a reason to
// wait, or "".
func (s *step) etcdQuorumWithout(ctx context.Context) (string, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	self := s.m.Status.NodeName
	var members []talos.EtcdMember
	healthy := map[string]bool{}
	var problems []string
	for _, o := range s.machines {
		if o.UID == s.m.UID || o.Status.AppliedConfig == nil || render.MachineRole(o) != v1alpha1.MachineRoleControlPlane {
			continue
		}
		node, err := s.r.Dialer.Configured(ctx, o.Spec.Address, s.creds)
		if err != nil {
			return "", err
		}
		st, err := node.EtcdStatus(ctx)
		if err == nil && members == nil {
			members, err = node.EtcdMembers(ctx)
		}
		_ = node.Close()
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s does not answer (%v)", o.Name, err))
		case len(memberErrors(st.Errors, s.x.op.Spec.Type)) > 0:
			problems = append(problems, fmt.Sprintf("%s reports %s", o.Name, strings.Join(st.Errors, "; ")))
		default:
			healthy[o.Status.NodeName] = true
		}
	}
	if members == nil {
		if len(problems) == 0 {
			return "", nil // the only control plane
		}
		return fmt.Sprintf("no other control plane lists etcd's members: %s", strings.Join(problems, ", ")), nil
	}
	voters, up := 0, 0
	var down []string
	for _, mb := range members {
		if mb.Learner {
			continue
		}
		voters++
		switch {
		case mb.Hostname == self:
		case healthy[mb.Hostname]:
			up++
		default:
			down = append(down, mb.Hostname)
		}
	}
	slices.Sort(down)
	if need := voters/2 + 1; up < need {
		msg := fmt.Sprintf("etcd would lose its quorum without %s: %d voting members, %d others healthy, %d needed", s.m.Name, voters, up, need)
		if len(down) > 0 {
			msg += "; not healthy: " + strings.Join(down, ", ")
		}
		if len(problems) > 0 {
			msg += " (" + strings.Join(problems, ", ") + ")"
		}
		return msg, nil
	}
	return "", nil
}

// memberErrors are the errors of a member's status that make it unhealthy
// for an operation of type t: a NOSPACE alarm is what etcd-defrag is run
// to clear, so it does not hold a defragmentation back.
func memberErrors(errs []string, t v1alpha1.OperationType) []string {
	if t != v1alpha1.OperationEtcdDefrag {
		return errs
	}
	var out []string
	for _, e := range errs {
		if !strings.Contains(e, "alarm:NOSPACE") {
			out = append(out, e)
		}
	}
	return out
}
