package operation

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
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
	return s.done(ctx, "defragmented member %s: database %s, now %s (%s in use)", after.MemberID,
		bytes(before.DBSize), bytes(after.DBSize), bytes(after.DBSizeInUse))
}
