package itest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/talossim"
)

// UpgradeRebootDelay is each simulated node's own reboot time in the
// upgrade benchmark: the floor of a rolling upgrade is the sum of them.
const UpgradeRebootDelay = 2 * time.Second

// UpgradePullDelay is how long a node of the pull variant takes to download
// its installer.
const UpgradePullDelay = time.Second

type RolloutResult struct {
	Total, Floor, Cpu time.Duration
	PeakHeap          uint64
}

// UpgradeRollout upgrades a v1.13.0 cluster of three control planes and
// workers to Talos target (v1.13.1, or v1.14.1 across a minor release).
func UpgradeRollout(b *testing.B, workers int, pullDelay time.Duration, target string) RolloutResult {
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Minute)
	defer cancel()
	InstallControllerRBAC(ctx, b)
	ns := CP.Namespace(b)
	BindControllerSecrets(ctx, b, ns)
	RunController(b, func(o *ctrlcmd.Options) {
		o.MachineRecheckInterval = time.Minute
		o.MachineConcurrency = 16
		o.InstallImage = "siderolabs/installer:v1.13.0"
	})
	nodes, _, _ := BenchCluster(ctx, b, ns, BenchClusterSpec{Name: "rollout", EndpointIP: "127.0.6.250", FirstAddr: "127.0.7.0",
		ControlPlanes: 3, Workers: workers, RebootDelay: UpgradeRebootDelay, PullDelay: pullDelay})

	MustApply(ctx, b, fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosOperation
metadata: {name: upgrade, namespace: %s}
spec: {clusterName: rollout, type: talos-upgrade, talosUpgrade: {version: %s}}
`, ns, target))
	ops := APIClient(b).IchorV1alpha1().TalosOperations(ns)

	stopHeap := make(chan struct{})
	peak := make(chan uint64, 1)
	go func() {
		var top uint64
		var ms runtime.MemStats
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			top = max(top, ms.HeapAlloc)
			select {
			case <-stopHeap:
				peak <- top
				return
			case <-t.C:
			}
		}
	}()
	cpuBefore := ProcessCPU()
	b.ResetTimer()
	start := time.Now()
	if _, err := ops.Start(ctx, "upgrade", &v1alpha1.TalosOperation{}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var last *v1alpha1.TalosOperation
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		op, err := ops.Get(ctx, "upgrade", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = op
		return op.Status.Phase == v1alpha1.OperationSucceeded || op.Status.Phase == v1alpha1.OperationFailed, nil
	})
	total := time.Since(start)
	b.StopTimer()
	cpu := ProcessCPU() - cpuBefore
	close(stopHeap)
	if err != nil || last.Status.Phase != v1alpha1.OperationSucceeded {
		b.Fatalf("the upgrade did not succeed: %v; %s", err, DescribeOperation(last))
	}
	var floor time.Duration
	var away []time.Duration
	for name, node := range nodes {
		d := TimeAway(node, start)
		if d == 0 {
			b.Fatalf("%s never went away", name)
		}
		floor += d
		away = append(away, d)
	}
	slices.Sort(away)
	b.Logf("%d nodes upgraded in %s; each away %s…%s, %s in all", len(nodes), total.Round(time.Millisecond),
		away[0].Round(time.Millisecond), away[len(away)-1].Round(time.Millisecond), floor.Round(time.Millisecond))
	LogWhereTimeGoes(ctx, b, ns, last, nodes, start)
	return RolloutResult{Total: total, Floor: floor, Cpu: cpu, PeakHeap: <-peak}
}

// TimeAway is how long node was not running since since.
func TimeAway(n *talossim.Node, since time.Time) time.Duration {
	var total time.Duration
	var awaySince time.Time
	for _, c := range n.PhaseChanges() {
		if c.At.Before(since) {
			continue
		}
		away := c.Phase != talossim.PhaseRunning
		switch {
		case away && awaySince.IsZero():
			awaySince = c.At
		case !away && !awaySince.IsZero():
			total += c.At.Sub(awaySince)
			awaySince = time.Time{}
		}
	}
	return total
}

// ProcessCPU is the user and system CPU time this process used so far.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// LogWhereTimeGoes splits Ichor's part of a rollout, between one node's
// return and the next one's departure, from the operation's Events (their
// event times are in microseconds) and the nodes' phase history: noticing
// a node is back and ending its step ("finish"), then starting the next
// step up to recording it ("start"), then the calls up to the node going
// away ("call").
func LogWhereTimeGoes(ctx context.Context, b *testing.B, ns string, op *v1alpha1.TalosOperation, nodes map[string]*talossim.Node, since time.Time) {
	evs, err := kubernetes.NewForConfigOrDie(CP.AdminConfig).EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + op.Name})
	if err != nil {
		b.Logf("events: %v", err)
		return
	}
	at := map[string]time.Time{} // reason/machine -> when
	for _, e := range evs.Items {
		machine, _, ok := strings.Cut(e.Note, ":")
		if ok && (e.Reason == "StepStarted" || e.Reason == "StepSucceeded") {
			at[e.Reason+"/"+machine] = e.EventTime.Time
		}
	}
	phases := func(name string) (away, back time.Time) {
		for _, c := range nodes[name].PhaseChanges() {
			if c.At.Before(since) {
				continue
			}
			if c.Phase != talossim.PhaseRunning && away.IsZero() {
				away = c.At
			}
			if c.Phase == talossim.PhaseRunning && !away.IsZero() && back.IsZero() {
				back = c.At
			}
		}
		return away, back
	}
	var finish, start, call []time.Duration
	for i, st := range op.Status.Steps[:len(op.Status.Steps)-1] {
		next := op.Status.Steps[i+1].Machine
		_, back := phases(st.Machine)
		away, _ := phases(next)
		done, begun := at["StepSucceeded/"+st.Machine], at["StepStarted/"+next]
		if back.IsZero() || away.IsZero() || done.IsZero() || begun.IsZero() {
			continue
		}
		finish, start, call = append(finish, done.Sub(back)), append(start, begun.Sub(done)), append(call, away.Sub(begun))
	}
	q := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "n/a"
		}
		slices.Sort(ds)
		return fmt.Sprintf("p50 %s p90 %s", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)*9/10].Round(time.Millisecond))
	}
	b.Logf("between a node's return and the next one's departure (%d gaps): finish %s; start %s; call %s", len(finish), q(finish), q(start), q(call))
}
