package scale

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// BenchmarkControllerScale measures ichor-controller (the binary, as its
// ServiceAccount, as its Deployment runs it) managing many clusters of
// simulated nodes in one management plane: ICHOR_BENCH_SCALE_CLUSTERS
// clusters (default 100) of ICHOR_BENCH_SCALE_MACHINES machines (default
// 100; one control plane, the rest workers), every node a talossim node in
// this process. Nine tenths of each cluster's machines are taken in,
// approved and configured first; the controller then runs them as it runs
// Ready machines (a health check a minute each). Then the last tenth (1,000
// at full size) is approved at once, and it reports how long those take to
// be configured (ConfigApplied: the config installed) and Ready (the node
// runs it), the controller's resident memory, and where its time went
// during that phase (its reconcile, queue and Talos call metrics).
//
// The clusters have no Kubernetes control plane: what is measured is the
// management of Talos machines. Run:
//
//	go test ./test/integration -run '^$' -bench ControllerScale -benchtime 1x -timeout 3h
func BenchmarkControllerScale(b *testing.B) {
	clusters, perCluster := itest.EnvInt(b, "ICHOR_BENCH_SCALE_CLUSTERS", 100), itest.EnvInt(b, "ICHOR_BENCH_SCALE_MACHINES", 100)
	if perCluster < 10 {
		b.Fatalf("ICHOR_BENCH_SCALE_MACHINES=%d: want at least 10, a tenth of them are the new ones", perCluster)
	}
	for range b.N {
		r := itest.ControllerScale(b, clusters, perCluster)
		b.ReportMetric(r.Configured.All.Seconds(), "new-configured-all-s")
		b.ReportMetric(itest.Ms(r.Configured.P50), "new-configured-p50-ms")
		b.ReportMetric(itest.Ms(r.Configured.P99), "new-configured-p99-ms")
		b.ReportMetric(r.Ready.All.Seconds(), "new-ready-all-s")
		b.ReportMetric(float64(r.Rss)/(1<<20), "controller-rss-MiB")
		b.ReportMetric(float64(r.PeakRSS)/(1<<20), "controller-peak-rss-MiB")
	}
}

// TestControllerScaleSmoke runs the benchmark's whole course on two
// clusters of ten machines, so that it cannot rot: every new machine is
// configured and Ready, and the controller's figures were read.
func TestControllerScaleSmoke(t *testing.T) {
	r := itest.ControllerScale(t, 2, 10)
	if r.Configured.All <= 0 || r.Ready.All < r.Configured.P50 || r.Rss <= 0 || r.PeakRSS < r.Rss {
		t.Errorf("implausible figures: %+v", r)
	}
}
