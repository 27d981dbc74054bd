package operation

import (
	"context"
	"fmt"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bytesize"
)

// startEtcdDefrag defragments one control plane's etcd member, which
// answers nothing else meanwhile: it holds the budget, like a reboot, and
// is taken only while etcd keeps its quorum without the member.
func startEtcdDefrag(ctx context.Context, s *step) (ctrl.Result, error) {
	if ok, res, err := s.mayTake(ctx, v1alpha1.DisruptionEtcdDefrag); !ok {
		return res, err
	}
	if err := s.begin(ctx, "", "defragmenting the etcd member"); err != nil {
		return ctrl.Result{}, err
	}
	return followEtcdDefrag(ctx, s)
}

// followEtcdDefrag defragments the member and reports its database before
// and after. Defragmenting again after a restart is harmless, so a Running
// step is simply run again.
func followEtcdDefrag(ctx context.Context, s *step) (ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	before, err := s.node.EtcdStatus(cctx)
	if err != nil {
		return s.failed(ctx, "read the etcd member's status: %v", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, s.r.Options.InstallTimeout)
	defer dcancel()
	if err := s.node.EtcdDefragment(dctx); err != nil {
		return s.failed(ctx, "%v", err)
	}
	after, err := s.node.EtcdStatus(cctx)
	if err != nil {
		return s.failed(ctx, "read the etcd member's status after defragmenting: %v", err)
	}
	msg := fmt.Sprintf("defragmented member %s: database %s, now %s (%s in use)", after.MemberID,
		bytesize.Format(before.DBSize), bytesize.Format(after.DBSize), bytesize.Format(after.DBSizeInUse))
	// etcd keeps a NOSPACE alarm until it is disarmed, and raises it again
	// at once for a member still over its quota: disarm, then look.
	alarms, err := s.node.EtcdAlarms(cctx)
	if err != nil {
		return s.failed(ctx, "%s; list etcd's alarms: %v", msg, err)
	}
	if len(alarms) == 0 {
		return s.done(ctx, "%s", msg)
	}
	if _, err := s.node.EtcdDisarmAlarms(cctx); err != nil {
		return s.failed(ctx, "%s; disarm etcd's alarms %v: %v", msg, alarms, err)
	}
	left, err := s.node.EtcdAlarms(cctx)
	if err != nil {
		return s.failed(ctx, "%s; list etcd's alarms: %v", msg, err)
	}
	switch {
	case len(left) == 0:
		return s.done(ctx, "%s; disarmed %s", msg, strings.Join(alarms, ", "))
	case s.i < len(s.x.op.Status.Steps)-1:
		return s.done(ctx, "%s; %s stays raised until the other members are defragmented", msg, strings.Join(left, ", "))
	default:
		return s.failed(ctx, "%s; %s is raised again after every member was defragmented: the data in use is over etcd's quota", msg, strings.Join(left, ", "))
	}
}
