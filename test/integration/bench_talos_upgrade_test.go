package integration

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

// upgradeRebootDelay is each simulated node's own reboot time in the
// upgrade benchmark: the floor of a rolling upgrade is the sum of them.
const upgradeRebootDelay = 2 * time.Second

// upgradePullDelay is how long a node of the pull variant takes to download
// its installer.
const upgradePullDelay = time.Second

// BenchmarkTalosUpgradeRollout measures a rolling Talos upgrade of three
// control planes and n workers whose nodes each take upgradeRebootDelay to
// reboot, one node at a time as the operation runs it. The floor is the
// sum of the time the nodes actually spent away (from their timestamped
// phase history); the benchmark reports the total, the floor, their ratio
// and Ichor's overhead in percent of the floor, and the test process's
// CPU time and peak heap during the rollout (an upper bound for the
// controller's: the process also runs ichor-apiserver and the simulated
// nodes). With pull=1s each node takes upgradePullDelay to download its
// installer, as a real node does (not counted in the floor: the node runs
// meanwhile): the overhead shows how much of that the rollout hides by
// pulling on the next nodes while one reboots.
// Run: go test ./test/integration -run '^$' -bench TalosUpgradeRollout -benchtime 1x
func BenchmarkTalosUpgradeRollout(b *testing.B) {
	for _, c := range []struct {
		workers int
		pull    time.Duration
	}{{10, 0}, {10, upgradePullDelay}, {100, 0}} {
		if testing.Short() && c.workers > 10 {
			continue
		}
		name := fmt.Sprintf("controlplanes=3,workers=%d", c.workers)
		if c.pull > 0 {
			name += ",pull=" + c.pull.String()
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				r := upgradeRollout(b, c.workers, c.pull)
				b.ReportMetric(r.total.Seconds(), "total-s")
				b.ReportMetric(r.floor.Seconds(), "floor-s")
				b.ReportMetric(r.total.Seconds()/r.floor.Seconds(), "total/floor")
				b.ReportMetric(100*(r.total.Seconds()-r.floor.Seconds())/r.floor.Seconds(), "overhead-%")
				b.ReportMetric(r.cpu.Seconds(), "process-cpu-s")
				b.ReportMetric(float64(r.peakHeap)/(1<<20), "peak-heap-MiB")
			}
		})
	}
}

type rolloutResult struct {
	total, floor, cpu time.Duration
	peakHeap          uint64
}

func upgradeRollout(b *testing.B, workers int, pullDelay time.Duration) rolloutResult {
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Minute)
	defer cancel()
	installControllerRBAC(ctx, b)
	ns := cp.Namespace(b)
	bindControllerSecrets(ctx, b, ns)
	runController(b, func(o *ctrlcmd.Options) {
		o.MachineRecheckInterval = time.Minute
		o.MachineConcurrency = 16
		o.InstallImage = "siderolabs/installer:v1.13.0"
	})
	nodes, _, _ := benchCluster(ctx, b, ns, benchClusterSpec{name: "rollout", endpointIP: "127.0.6.250", firstAddr: "127.0.7.0",
		controlPlanes: 3, workers: workers, rebootDelay: upgradeRebootDelay, pullDelay: pullDelay})

	mustApply(ctx, b, fmt.Sprintf(`
apiVersion: ichor.dev/v1alpha1
kind: TalosOperation
metadata: {name: upgrade, namespace: %s}
spec: {clusterName: rollout, type: talos-upgrade, talosUpgrade: {version: v1.13.1}}
`, ns))
	ops := apiClient(b).IchorV1alpha1().TalosOperations(ns)

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
	cpuBefore := processCPU()
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
	cpu := processCPU() - cpuBefore
	close(stopHeap)
	if err != nil || last.Status.Phase != v1alpha1.OperationSucceeded {
		b.Fatalf("the upgrade did not succeed: %v; %s", err, describeOperation(last))
	}
	var floor time.Duration
	var away []time.Duration
	for name, node := range nodes {
		d := timeAway(node, start)
		if d == 0 {
			b.Fatalf("%s never went away", name)
		}
		floor += d
		away = append(away, d)
	}
	slices.Sort(away)
	b.Logf("%d nodes upgraded in %s; each away %s…%s, %s in all", len(nodes), total.Round(time.Millisecond),
		away[0].Round(time.Millisecond), away[len(away)-1].Round(time.Millisecond), floor.Round(time.Millisecond))
	logWhereTimeGoes(ctx, b, ns, last, nodes, start)
	return rolloutResult{total: total, floor: floor, cpu: cpu, peakHeap: <-peak}
}

// timeAway is how long node was not running since since.
func timeAway(n *talossim.Node, since time.Time) time.Duration {
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

// processCPU is the user and system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// logWhereTimeGoes splits Ichor's part of a rollout, between one node's
// return and the next one's departure, from the operation's Events (their
// event times are in microseconds) and the nodes' phase history: noticing
// a node is back and ending its step ("finish"), then starting the next
// step up to recording it ("start"), then the calls up to the node going
// away ("call").
func logWhereTimeGoes(ctx context.Context, b *testing.B, ns string, op *v1alpha1.TalosOperation, nodes map[string]*talossim.Node, since time.Time) {
	evs, err := kubernetes.NewForConfigOrDie(cp.AdminConfig).EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + op.Name})
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
