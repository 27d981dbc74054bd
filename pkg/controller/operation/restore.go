package operation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/etcd/snapshot"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// An etcd-restore puts a TalosBackup's etcd snapshot back into the running
// cluster. Nothing is touched before the snapshot was fetched, decrypted
// with the identity the admin named and checked against the SHA-256 the
// backup recorded: a wrong identity or a corrupt file fails the operation
// with every member intact. The verified snapshot is kept in the
// controller's scratch directory until the operation ends or is deleted
// (fetched and checked again if the controller restarted meanwhile), and
// no longer: a snapshot refused is removed at once, the operation holds
// its finalizer from before the fetch, and the directory is swept of what
// no operation needs when the controller starts (sweepScratch).
//
// Then, in restoreSteps' order: the other control planes leave etcd (their
// etcd stays stopped until they reboot), the first control plane's
// EPHEMERAL partition is wiped (with it the last member, so the old etcd
// cluster is gone and nothing can join it), then the others', the snapshot
// is uploaded to the first and etcd bootstrapped from it, and the step
// ends only once the cluster's kube-apiserver serves the snapshot's data:
// the snapshot's revision, and kube-system's resourceVersion as the
// snapshot last wrote it. The others join, and every worker's kubelet is
// restarted, so that none keeps watching from revisions the cluster no
// longer has.

// restoreMarkerKey is the etcd key whose last write in the snapshot the
// recovered cluster must report: kube-system's Namespace, which every
// cluster has and nothing rewrites.
const (
	restoreMarkerNamespace = metav1.NamespaceSystem
	restoreMarkerKey       = "/registry/namespaces/" + restoreMarkerNamespace
)

// restoreSteps are an etcd-restore's steps over the targets, control planes
// first: the first control plane is the one the snapshot is recovered on.
func restoreSteps(_ *v1alpha1.TalosOperation, targets []*v1alpha1.TalosMachine) []v1alpha1.OperationStep {
	cps, workers := byRole(targets)
	if len(cps) == 0 {
		return nil
	}
	var steps []v1alpha1.OperationStep
	add := func(action v1alpha1.StepAction, machines ...string) {
		for _, m := range machines {
			steps = append(steps, v1alpha1.OperationStep{Machine: m, Action: action, Phase: v1alpha1.OperationPending})
		}
	}
	first, others := cps[0], cps[1:]
	add(v1alpha1.ActionLeaveEtcd, others...)
	add(v1alpha1.ActionWipeEtcd, first)
	add(v1alpha1.ActionWipeEtcd, others...)
	add(v1alpha1.ActionRecoverEtcd, first)
	add(v1alpha1.ActionJoinEtcd, others...)
	add(v1alpha1.ActionRestartKubelet, workers...)
	return steps
}

// startRestore starts an etcd-restore step.
func startRestore(ctx context.Context, s *step) (ctrl.Result, error) {
	switch s.record().Action {
	case v1alpha1.ActionLeaveEtcd:
		return s.leaveEtcd(ctx, true)
	case v1alpha1.ActionWipeEtcd:
		return s.wipeEtcd(ctx)
	case v1alpha1.ActionRecoverEtcd:
		return s.recoverEtcd(ctx, true)
	case v1alpha1.ActionJoinEtcd:
		if err := s.begin(ctx, "", "waiting for the node to join the recovered etcd"); err != nil {
			return ctrl.Result{}, err
		}
		return s.joinEtcd(ctx)
	case v1alpha1.ActionRestartKubelet:
		return s.restartKubelet(ctx)
	}
	return s.failed(ctx, "an etcd-restore step without an action this controller knows (%q)", s.record().Action)
}

// followRestore follows an etcd-restore step in flight.
func followRestore(ctx context.Context, s *step) (ctrl.Result, error) {
	switch s.record().Action {
	case v1alpha1.ActionLeaveEtcd:
		return s.leaveEtcd(ctx, false)
	case v1alpha1.ActionWipeEtcd:
		back, res, err := s.backFromWipe(ctx)
		if !back || err != nil {
			return res, err
		}
		return s.done(ctx, "EPHEMERAL wiped: the node runs a new boot with an empty etcd")
	case v1alpha1.ActionRecoverEtcd:
		return s.recoverEtcd(ctx, false)
	case v1alpha1.ActionJoinEtcd:
		return s.joinEtcd(ctx)
	case v1alpha1.ActionRestartKubelet:
		return s.restartKubelet(ctx)
	}
	return s.failed(ctx, "an etcd-restore step without an action this controller knows (%q)", s.record().Action)
}

// takeForRestore takes the cluster's disruption budget for the step's node,
// without the health checks of other operations: a restore takes etcd
// away on purpose.
func (s *step) takeForRestore(ctx context.Context) (bool, ctrl.Result, error) {
	reason, msg, err := s.acquire(ctx, v1alpha1.DisruptionReset, 1)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if msg != "" {
		res, err := s.waitFor(reason, "%s", msg)
		return false, res, err
	}
	return true, ctrl.Result{}, nil
}

// isMember reports whether the node's own hostname is a member of the etcd
// cluster it reports.
func (s *step) isMember(ctx context.Context) (bool, error) {
	id, err := s.node.Identity(ctx)
	if err != nil {
		return false, err
	}
	members, err := s.node.EtcdMembers(ctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(members, func(m talos.EtcdMember) bool { return m.Hostname == id.Hostname }), nil
}

// leaveEtcd has the node leave etcd, unless it reports it is no member.
func (s *step) leaveEtcd(ctx context.Context, starting bool) (ctrl.Result, error) {
	if starting {
		if ok, res, err := s.takeForRestore(ctx); !ok {
			return res, err
		}
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	if starting {
		if err := intake.CheckIdentity(cctx, s.node, s.m); err != nil {
			return s.failed(ctx, "the node at %s is not this machine: %v", s.m.Spec.Address, err)
		}
		if err := s.begin(ctx, "", "leaving etcd"); err != nil {
			return ctrl.Result{}, err
		}
	}
	member, err := s.isMember(cctx)
	if err != nil {
		// A restore that failed after its wipes left no etcd anywhere: then
		// there is nothing to leave, and this restore finishes that one.
		answers, aerr := s.etcdAnswersAnywhere(ctx)
		if aerr != nil {
			return ctrl.Result{}, aerr
		}
		if !answers {
			return s.done(ctx, "no control plane's etcd answers: nothing to leave")
		}
		return s.failed(ctx, "read the node's etcd membership: %v", err)
	}
	if !member {
		return s.done(ctx, "not an etcd member: nothing to leave")
	}
	if err := s.node.EtcdLeave(cctx); err != nil {
		return s.failed(ctx, "%v", err)
	}
	return s.done(ctx, "left etcd; its etcd stays stopped until the node reboots")
}

// etcdAnswersAnywhere reports whether the etcd of any of the cluster's
// control planes answers, each asked over its own session.
func (s *step) etcdAnswersAnywhere(ctx context.Context) (bool, error) {
	machines := s.machines
	if machines == nil {
		var err error
		if machines, err = s.r.machines(ctx, s.x.op); err != nil {
			return false, err
		}
	}
	for _, m := range machines {
		if render.MachineRole(m) != v1alpha1.MachineRoleControlPlane || m.Status.AppliedConfig == nil {
			continue
		}
		node := s.node
		if m.UID != s.m.UID {
			var err error
			if node, err = s.r.Dialer.Configured(ctx, m.Spec.Address, s.creds); err != nil {
				return false, err
			}
		}
		cctx, cancel := s.call(ctx)
		_, err := node.EtcdStatus(cctx)
		cancel()
		if node != s.node {
			_ = node.Close()
		}
		if err == nil {
			return true, nil
		}
	}
	return false, nil
}

// wipeEtcd wipes the node's EPHEMERAL partition and reboots it, recording
// its boot ID first.
func (s *step) wipeEtcd(ctx context.Context) (ctrl.Result, error) {
	if ok, res, err := s.takeForRestore(ctx); !ok {
		return res, err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	if err := intake.CheckIdentity(cctx, s.node, s.m); err != nil {
		return s.failed(ctx, "the node at %s is not this machine: %v", s.m.Spec.Address, err)
	}
	bootID, err := s.node.BootID(cctx)
	if err != nil {
		return s.failed(ctx, "read the boot ID before wiping: %v", err)
	}
	if err := s.begin(ctx, bootID, "wiping EPHEMERAL (etcd's data) and rebooting"); err != nil {
		return ctrl.Result{}, err
	}
	if err := s.node.WipeEtcdData(cctx); err != nil {
		return s.failed(ctx, "%v", err)
	}
	return ctrl.Result{RequeueAfter: s.r.Options.StepPollInterval}, nil
}

// backFromWipe reports whether the node is back from its wipe: another
// boot ID, in stage running. It is not ready (its etcd waits for the
// recovery), so backFromReboot's readiness is not asked for.
func (s *step) backFromWipe(ctx context.Context) (bool, ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	rec := s.record()
	id, err := s.node.BootID(cctx)
	var st *talos.Status
	if err == nil {
		st, err = s.node.Status(cctx)
	}
	switch {
	case err != nil && s.timedOut():
		res, err2 := s.failed(ctx, "the node did not come back within %s of its wipe: %v", s.r.Options.StepTimeout, err)
		return false, res, err2
	case err != nil:
		res, err2 := s.wait("waiting for the node to come back from its wipe")
		return false, res, err2
	case id == rec.BootID && st.Stage == "running":
		// The controller stopped between recording the step and calling.
		if err := s.node.WipeEtcdData(cctx); err != nil {
			res, err2 := s.failed(ctx, "%v", err)
			return false, res, err2
		}
	case id != rec.BootID && st.Stage == "running":
		return true, ctrl.Result{}, nil
	}
	if s.timedOut() {
		res, err2 := s.failed(ctx, "the node did not come back running within %s of its wipe (stage %s)", s.r.Options.StepTimeout, st.Stage)
		return false, res, err2
	}
	res, err2 := s.wait("waiting for the node to come back from its wipe (stage %s)", st.Stage)
	return false, res, err2
}

// recoverEtcd uploads the verified snapshot and bootstraps etcd from it,
// unless the node's etcd already runs (the controller stopped after the
// bootstrap), then waits for kube-apiserver to serve the snapshot's data.
func (s *step) recoverEtcd(ctx context.Context, starting bool) (ctrl.Result, error) {
	src, refused, err := s.r.restoreSnapshot(ctx, s.x.op)
	if err != nil {
		return ctrl.Result{}, err
	}
	if refused != "" {
		return s.failed(ctx, "%s", refused)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	if starting {
		if err := intake.CheckIdentity(cctx, s.node, s.m); err != nil {
			return s.failed(ctx, "the node at %s is not this machine: %v", s.m.Spec.Address, err)
		}
		if err := s.begin(ctx, "", "recovering etcd from TalosBackup %s (revision %d, %s)", src.backup.Name, src.info.Revision, src.file.Digest); err != nil {
			return ctrl.Result{}, err
		}
	}
	if _, err := s.node.EtcdStatus(cctx); err != nil {
		// The node's etcd does not run: it waits for the recovery.
		if err := s.uploadAndBootstrap(ctx, src); err != nil {
			return s.failed(ctx, "%v", err)
		}
		return ctrl.Result{RequeueAfter: s.r.Options.StepPollInterval}, nil
	}
	served, err := s.servesSnapshot(ctx, src.info)
	if served == "" && err == nil {
		return s.done(ctx, "etcd recovered from TalosBackup %s: kube-apiserver serves its data, at revision %d and later", src.backup.Name, src.info.Revision)
	}
	if s.timedOut() {
		return s.failed(ctx, "kube-apiserver did not serve the snapshot's data within %s of the recovery: %s", s.r.Options.StepTimeout, cmpOr(served, err))
	}
	return s.wait("waiting for kube-apiserver to serve the recovered data: %s", cmpOr(served, err))
}

// uploadAndBootstrap sends the snapshot (bounded by InstallTimeout, as it
// may be gigabytes) and bootstraps etcd from it.
func (s *step) uploadAndBootstrap(ctx context.Context, src *restoreSource) error {
	f, err := os.Open(src.path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	uctx, cancel := context.WithTimeout(ctx, s.r.Options.InstallTimeout)
	defer cancel()
	if err := s.node.EtcdRecover(uctx, io.Reader(f)); err != nil {
		return err
	}
	err = s.node.BootstrapRecover(uctx)
	if errors.Is(err, talos.ErrAlreadyBootstrapped) {
		return nil
	}
	return err
}

// servesSnapshot says how the cluster's kube-apiserver differs from the
// snapshot, or "": kube-system's resourceVersion is the snapshot's last
// write of it, and the store's revision is the snapshot's or later.
func (s *step) servesSnapshot(ctx context.Context, info snapshot.Info) (string, error) {
	cs, err := s.kube()
	if err != nil {
		return "", err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	var ns *corev1.Namespace
	if err := s.withAccess(cctx, func() (err error) {
		ns, err = cs.CoreV1().Namespaces().Get(cctx, restoreMarkerNamespace, metav1.GetOptions{})
		return err
	}); err != nil {
		return "", err
	}
	if want := strconv.FormatInt(info.KeyRevision, 10); ns.ResourceVersion != want {
		return fmt.Sprintf("Namespace %s is at resourceVersion %s, the snapshot's at %s", restoreMarkerNamespace, ns.ResourceVersion, want), nil
	}
	// A list answers at the store's current revision; it names kube-system,
	// the one Namespace the controller may read.
	list, err := cs.CoreV1().Namespaces().List(cctx, metav1.ListOptions{FieldSelector: "metadata.name=" + restoreMarkerNamespace})
	if err != nil {
		return "", err
	}
	rv, err := strconv.ParseInt(list.ResourceVersion, 10, 64)
	if err != nil {
		return "", fmt.Errorf("kube-apiserver lists at resourceVersion %q: %w", list.ResourceVersion, err)
	}
	if rv < info.Revision {
		return fmt.Sprintf("etcd is at revision %d, before the snapshot's %d", rv, info.Revision), nil
	}
	return "", nil
}

// joinEtcd waits for the node to report itself a member of the recovered
// etcd.
func (s *step) joinEtcd(ctx context.Context) (ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	member, err := s.isMember(cctx)
	if err == nil && member {
		return s.done(ctx, "joined the recovered etcd")
	}
	if s.timedOut() {
		return s.failed(ctx, "the node did not join the recovered etcd within %s: %s", s.r.Options.StepTimeout, cmpOr("", err))
	}
	return s.wait("waiting for the node to join the recovered etcd")
}

// restartKubelet restarts the node's kubelet; a restart again after the
// controller stopped in between is harmless.
func (s *step) restartKubelet(ctx context.Context) (ctrl.Result, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	if s.record().Phase == v1alpha1.OperationPending {
		if err := intake.CheckIdentity(cctx, s.node, s.m); err != nil {
			return s.failed(ctx, "the node at %s is not this machine: %v", s.m.Spec.Address, err)
		}
		if err := s.begin(ctx, "", "restarting the kubelet"); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := s.node.RestartService(cctx, "kubelet"); err != nil {
		return s.failed(ctx, "%v", err)
	}
	return s.done(ctx, "kubelet restarted")
}

// cmpOr is msg, or err's message when msg is empty.
func cmpOr(msg string, err error) string {
	if msg == "" && err != nil {
		return err.Error()
	}
	return msg
}
