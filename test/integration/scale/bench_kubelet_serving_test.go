package scale

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"ichor.dev/ichor/test/integration/itest"
)

// BenchmarkKubeletServingApproval measures how long a kubelet serving
// request waits for Ichor's approval, on a Ready cluster of one control
// plane and n-1 workers, three ways:
//
//   - switch-on: kubelet serving certificates are switched on, every
//     kubelet restarts and requests its certificate;
//   - burst: one request per node, made as the node's kubelet makes it
//     (its identity, its names), all created at once; it also reports how
//     long the last approval took (burst-all-ms) against the floor, the same
//     n approval writes made straight to the cluster's kube-apiserver at
//     the approver's parallelism (64) in the same run (burst-floor-ms);
//     it runs ICHOR_BENCH_BURSTS times (default 3), a minute apart, and
//     reports the slowest (each is logged): one burst is one draw of what
//     else the cluster and the controller are doing at that moment;
//   - steady: one request per node at a uniformly random moment of a window
//     (ICHOR_BENCH_STEADY_WINDOW, default 10m: certificates rotating spread
//     over ten minutes).
//
// ICHOR_BENCH_BURST_PROFILE=file writes a CPU profile of this process (the
// controller, ichor-apiserver and the simulated nodes) during each burst
// (file.0, file.1, …) and the least approver's (file.least).
//
// Each reports p50 and p99 (ms) from a request's creation to its approval,
// both taken from a watch in the cluster's real kube-apiserver.
// Run: go test ./test/integration -run '^$' -bench KubeletServing -benchtime 1x -timeout 2h
func BenchmarkKubeletServingApproval(b *testing.B) {
	bursts := 3
	if v := os.Getenv("ICHOR_BENCH_BURSTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("ICHOR_BENCH_BURSTS: want a positive count, have %q", v)
		}
		bursts = n
	}
	window := 10 * time.Minute
	if v := os.Getenv("ICHOR_BENCH_STEADY_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("ICHOR_BENCH_STEADY_WINDOW: %v", err)
		}
		window = d
	}
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for range b.N {
				r := itest.ApprovalLatency(b, n, bursts, window)
				b.ReportMetric(itest.Ms(r.SwitchOn.P50), "switch-on-p50-ms")
				b.ReportMetric(itest.Ms(r.SwitchOn.P99), "switch-on-p99-ms")
				b.ReportMetric(itest.Ms(r.Burst.P50), "burst-p50-ms")
				b.ReportMetric(itest.Ms(r.Burst.P99), "burst-p99-ms")
				b.ReportMetric(itest.Ms(r.Burst.All), "burst-all-ms")
				b.ReportMetric(itest.Ms(r.Floor), "burst-floor-ms")
				b.ReportMetric(float64(r.Burst.All)/float64(r.Floor), "burst/floor")
				b.ReportMetric(itest.Ms(r.Ideal.All), "burst-least-all-ms")
				b.ReportMetric(float64(r.Burst.All)/float64(r.Ideal.All), "burst/least")
				b.ReportMetric(itest.Ms(r.Steady.P50), "steady-p50-ms")
				b.ReportMetric(itest.Ms(r.Steady.P99), "steady-p99-ms")
			}
		})
	}
}
