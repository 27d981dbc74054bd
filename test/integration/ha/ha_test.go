package ha

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/integration/itest"
	"ichor.dev/ichor/test/talossim"
)

// TestHAIchorAPIServerKilled: each ichor-apiserver replica in turn is
// killed (SIGKILL) while it serves the aggregator's requests, under a load
// of writes and watches; no request fails after one retry, and every
// watcher sees every write, its watch resumed from its resourceVersion on
// the other replica. The killed replica starts again before the next.
func TestHAIchorAPIServerKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	load := itest.StartAPILoad(ctx, t, itest.CP.Namespace(t), 8, 3, 200*time.Millisecond)
	itest.WaitProgress(ctx, t, load, itest.HAProgress())
	for range harness.IchorReplicas {
		serving := 0
		for i := range harness.IchorReplicas {
			if itest.CP.IchorReplicaConnections(i) > itest.CP.IchorReplicaConnections(serving) {
				serving = i
			}
		}
		t.Logf("killing ichor-apiserver replica %d (%d connections)", serving, itest.CP.IchorReplicaConnections(serving))
		itest.CP.KillIchorReplica(serving)
		itest.WaitProgress(ctx, t, load, itest.HAProgress())
		if err := itest.CP.StartIchorReplica(ctx, serving); err != nil {
			t.Fatal(err)
		}
		itest.WaitProgress(ctx, t, load, itest.HAProgress())
	}
	itest.CheckFigures(t, "kill one ichor-apiserver, each in turn", load.Stop(time.Minute))
}

// TestHAEtcdMemberStopped: each member of ichor-apiserver's etcd cluster
// in turn is stopped, under load, and started again; no request fails
// after one retry and no event is lost.
func TestHAEtcdMemberStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	load := itest.StartAPILoad(ctx, t, itest.CP.Namespace(t), 8, 3, 200*time.Millisecond)
	itest.WaitProgress(ctx, t, load, itest.HAProgress())
	for i := range harness.IchorEtcdMembers {
		t.Logf("stopping etcd member %d", i)
		if err := itest.CP.StopIchorEtcdMember(i); err != nil {
			t.Logf("etcd member %d ended with %v", i, err)
		}
		itest.WaitProgress(ctx, t, load, itest.HAProgress())
		if err := itest.CP.StartIchorEtcdMember(ctx, i); err != nil {
			t.Fatal(err)
		}
		itest.WaitProgress(ctx, t, load, itest.HAProgress())
	}
	itest.CheckFigures(t, "stop one etcd member, each in turn", load.Stop(time.Minute))
}

// TestHAKubeAPIServerRestarted: the management cluster's kube-apiserver
// restarts under load. While it is down nothing reaches Ichor, so a failed
// request's one retry waits until Ichor's API answers through it again;
// none fails after that retry, and the watches resume without a lost
// event.
func TestHAKubeAPIServerRestarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	load := itest.StartAPILoad(ctx, t, itest.CP.Namespace(t), 8, 3, 200*time.Millisecond)
	load.BeforeRetry = itest.IchorAnswers
	itest.WaitProgress(ctx, t, load, itest.HAProgress())
	began := time.Now()
	if err := itest.CP.RestartKubeAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := itest.IchorAnswers(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver restarted; Ichor's API answered through it again %v after the restart began", time.Since(began).Round(time.Millisecond))
	itest.WaitProgress(ctx, t, load, itest.HAProgress())
	itest.CheckFigures(t, "restart kube-apiserver", load.Stop(time.Minute))
}

// TestHAControllerLeaderKilledMidRollout: two ichor-controller replicas
// elect a leader; the leader is killed (SIGKILL, so it cannot release the
// lease) while a rolling reboot has a node away, under a load of writes
// and watches. The other replica takes the lease once it runs out, resumes
// the step in flight, and finishes: every node rebooted exactly once, at
// most one away at a time. Then a node's Talos API hangs mid-rollout: its
// step fails when its time is up and the rollout stops there. The load
// runs throughout. The new leader's metrics have the workqueue depth,
// reconcile latency and Talos call latency.
func TestHAControllerLeaderKilledMidRollout(t *testing.T) {
	binary, err := harness.BuildBinary(t.TempDir(), "ichor-controller")
	if err != nil {
		t.Fatal(err)
	}
	d := itest.NewDemoClusterWith(t, itest.DemoSetup{Tune: func(o *ctrlcmd.Options) {
		o.OperationPollInterval = 250 * time.Millisecond
		o.OperationStepTimeout = itest.OperationStepTimeout
	}})
	d.BecomesReady(t)
	d.Controller.Stop()
	ctx := d.Ctx

	first := itest.StartControllerProcess(t, binary, "ichor-controller-a", d)
	var holder string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		holder, _ = itest.LeaseHolder(ctx, t, harness.IchorNamespace, ctrlcmd.DefaultLeaderElectionID)
		return holder != "" && first.Proc.Exited() == nil, nil
	}); err != nil {
		t.Fatalf("the first replica never led: %v\n%s", err, first.Proc.LogTail())
	}
	second := itest.StartControllerProcess(t, binary, "ichor-controller-b", d)
	t.Logf("replica a leads as %s; replica b stands by", holder)

	load := itest.StartAPILoad(ctx, t, itest.CP.Namespace(t), 4, 2, 200*time.Millisecond)
	before, since := d.Reboots(), time.Now()
	d.CreateOperation(t, itest.Operator, "reboot-all", "clusterName: demo\ntype: reboot")
	d.CreateOperation(t, itest.Operator, "reboot-hung", "clusterName: demo\ntype: reboot\nmachines: [worker-1, worker-2]")
	inFlight := d.StartWatching(t, itest.Operator, "reboot-all", "the second node's step running", func(op *v1alpha1.TalosOperation) bool {
		return len(op.Status.Steps) > 1 && op.Status.Steps[1].Phase == v1alpha1.OperationRunning
	}).Status.Steps[1].Machine
	first.Proc.Kill()
	killed := time.Now()
	t.Logf("killed the leader while %s's step runs (node %s)", inFlight, d.Nodes[inFlight].Phase())

	var newHolder string
	var acquired time.Time
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		newHolder, acquired = itest.LeaseHolder(ctx, t, harness.IchorNamespace, ctrlcmd.DefaultLeaderElectionID)
		return newHolder != "" && newHolder != holder, nil
	}); err != nil {
		t.Fatalf("replica b never took the lease: %v\n%s", err, second.Proc.LogTail())
	}
	takeover := acquired.Sub(killed)
	t.Logf("replica b took the lease %v after the kill (lease duration %v)", takeover.Round(time.Millisecond), itest.LeaseDuration)
	// The lease runs out at most its duration after the leader's last
	// renewal, which was before the kill, and the standby tries every retry
	// period; on a busy machine its tries come late (17.9 s was seen in
	// CI). A takeover that needs a second lease is a failure.
	if limit := 2 * itest.LeaseDuration; takeover > limit {
		t.Errorf("the takeover took %v, more than two leases (%v each)", takeover, itest.LeaseDuration)
	}

	op := d.WaitOperationEnds(t, "reboot-all", v1alpha1.OperationSucceeded)
	itest.RebootedOnce(t, before, d.Reboots())
	if most, when := itest.MostAwayAtOnce(d.Nodes, since); most != 1 {
		t.Errorf("at most %d nodes were away at once (%s), want exactly 1", most, when)
	}
	if got := itest.StepOrder(op); !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}) {
		t.Errorf("steps %v", got)
	}
	itest.WaitBudgetFree(ctx, t, d.Ns, "demo")

	// A node whose Talos API hangs mid-rollout: once worker-1's step runs,
	// every call to it waits for ever. The step fails when its time is up,
	// saying so, the rollout stops there (worker-2 is not touched), and the
	// budget is given back; the API load does not notice.
	stepStarted := time.Now()
	d.StartWatching(t, itest.Operator, "reboot-hung", "worker-1's step running", func(op *v1alpha1.TalosOperation) bool {
		return len(op.Status.Steps) > 0 && op.Status.Steps[0].Phase == v1alpha1.OperationRunning
	})
	before = d.Reboots()
	if err := d.Nodes["worker-1"].SetFaults(talossim.Faults{Slow: time.Hour}); err != nil {
		t.Fatal(err)
	}
	op = d.WaitOperationEnds(t, "reboot-hung", v1alpha1.OperationFailed)
	hungStep, nextStep := op.Status.Steps[0], op.Status.Steps[1]
	t.Logf("worker-1 hung: its step failed %v after it began: %s", time.Since(stepStarted).Round(time.Second), hungStep.Message)
	if hungStep.Machine != "worker-1" || hungStep.Phase != v1alpha1.OperationFailed {
		t.Errorf("worker-1's step %+v", hungStep)
	}
	if nextStep.Phase != v1alpha1.OperationPending {
		t.Errorf("worker-2's step %+v ran after worker-1 hung", nextStep)
	}
	if after := d.Reboots(); after["worker-2"] != before["worker-2"] {
		t.Errorf("worker-2 rebooted after worker-1 hung")
	}
	d.Nodes["worker-1"].ClearFaults()
	itest.WaitBudgetFree(ctx, t, d.Ns, "demo")
	itest.CheckFigures(t, "kill the leading ichor-controller mid-rollout, then a node hangs mid-rollout", load.Stop(time.Minute))

	metrics := itest.ScrapeControllerMetrics(ctx, t, second.Metrics)
	for _, m := range []string{
		`workqueue_depth{controller="talosoperation"`,
		`controller_runtime_reconcile_time_seconds_bucket{controller="talosoperation"`,
		`ichor_talos_call_duration_seconds_bucket{code="OK",method="/machine.MachineService/Reboot"`,
	} {
		if !strings.Contains(metrics, m) {
			t.Errorf("the new leader's metrics lack %s", m)
		}
	}
}
