package talossim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/crypto/x509"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// Scale harness: the issue asks for 1,000 simulated nodes in one process on 2 cores, with a benchmark
// reporting memory per node and calls per second through the real machinery client. Run it with e.g.
//
//	go test ./test/talossim/ -run '^$' -bench 'NodeMemory|CallsThroughRealClient' -benchtime=1x
//
// and TALOSSIM_BENCH_NODES=10 for a quick smoke run. TestScaleHarnessSmoke exercises the same code with a
// handful of nodes in every `go test`, so the benchmarks cannot rot.

// scaleNodesEnv overrides how many nodes the scale benchmarks start.
const scaleNodesEnv = "TALOSSIM_BENCH_NODES"

// scaleHeapProfileEnv names a file BenchmarkNodeMemory writes a heap profile of the running fleet to.
const scaleHeapProfileEnv = "TALOSSIM_BENCH_HEAPPROFILE"

// defaultScaleNodes is the node count the scale requirement names.
const defaultScaleNodes = 1000

// scaleCallers is how many goroutines issue calls concurrently in BenchmarkCallsThroughRealClient.
const scaleCallers = 64

// scaleTimeout bounds fleet start-up, client set-up and teardown.
const scaleTimeout = 5 * time.Minute

// scaleNodeCount returns the node count from scaleNodesEnv, or defaultScaleNodes.
func scaleNodeCount(tb testing.TB) int {
	tb.Helper()

	s := os.Getenv(scaleNodesEnv)
	if s == "" {
		return defaultScaleNodes
	}

	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", scaleNodesEnv, s)
	}

	return n
}

// forEachParallel runs fn(i) for i in [0, n) on GOMAXPROCS workers and returns the first error.
func forEachParallel(n int, fn func(i int) error) error {
	var (
		next     atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)

	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}

				if err := fn(i); err != nil {
					errOnce.Do(func() { firstErr = err })
				}
			}
		})
	}

	wg.Wait()

	return firstErr
}

// startFleet starts n maintenance-mode nodes, each on its own 127.0.0.1 port. On error the nodes that
// did start are stopped again.
func startFleet(ctx context.Context, n int) ([]*Node, error) {
	nodes := make([]*Node, n)

	err := forEachParallel(n, func(i int) error {
		node, err := Start(ctx, Options{ListenAddress: "127.0.0.1:0"})
		if err != nil {
			return fmt.Errorf("starting node %d: %w", i, err)
		}

		nodes[i] = node

		return nil
	})
	if err != nil {
		stopFleet(nodes)

		return nil, err
	}

	return nodes, nil
}

// stopFleet stops every (non-nil) node.
func stopFleet(nodes []*Node) {
	_ = forEachParallel(len(nodes), func(i int) error { //nolint:errcheck // never fails
		if nodes[i] != nil {
			nodes[i].Stop()
		}

		return nil
	})
}

// dialFleet creates one real machinery client per node, connecting the way `talosctl --cert-fingerprint`
// does (no CA, the node's maintenance SPKI fingerprint pinned). client.New does not connect yet.
func dialFleet(ctx context.Context, nodes []*Node) ([]*client.Client, error) {
	clients := make([]*client.Client, len(nodes))

	for i, n := range nodes {
		fp, err := x509.ParseFingerprint(n.MaintenanceFingerprint())
		if err != nil {
			closeClients(clients)

			return nil, fmt.Errorf("node %d: parsing fingerprint: %w", i, err)
		}

		c, err := client.New(ctx,
			client.WithEndpoints(n.Addr()),
			client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true, VerifyConnection: x509.MatchSPKIFingerprints(fp)}), //nolint:gosec // pinned
		)
		if err != nil {
			closeClients(clients)

			return nil, fmt.Errorf("node %d: client.New: %w", i, err)
		}

		clients[i] = c
	}

	return clients, nil
}

// closeClients closes every (non-nil) client.
func closeClients(clients []*client.Client) {
	for _, c := range clients {
		if c != nil {
			c.Close() //nolint:errcheck
		}
	}
}

// scaleOp is one kind of call the calls benchmark issues.
type scaleOp int

const (
	opVersion scaleOp = iota // MachineService.Version
	opNodeIP                 // COSI State.Get of k8s NodeIP
	opMixed                  // the two alternating
)

// scaleCall issues call number i of kind op to the node behind c (whose listen IP is want) and checks the
// answer minimally, so a benchmark that measures errors fails instead.
func scaleCall(ctx context.Context, c *client.Client, want netip.Addr, op scaleOp, i uint64) error {
	if op == opMixed {
		op = scaleOp(i % 2)
	}

	switch op {
	case opVersion:
		resp, err := c.Version(ctx)
		if err != nil {
			return fmt.Errorf("calling Version: %w", err)
		}

		if msgs := resp.GetMessages(); len(msgs) != 1 || msgs[0].GetVersion().GetTag() != DefaultVersion {
			return fmt.Errorf("unexpected Version response %v", resp)
		}
	default:
		ip, err := safe.StateGet[*k8s.NodeIP](ctx, c.COSI, k8s.NewNodeIP(k8s.NamespaceName, k8s.KubeletID).Metadata())
		if err != nil {
			return fmt.Errorf("get NodeIP: %w", err)
		}

		if addrs := ip.TypedSpec().Addresses; len(addrs) != 1 || addrs[0] != want {
			return fmt.Errorf("NodeIP addresses %v, want [%s]", addrs, want)
		}
	}

	return nil
}

// listenIPs returns each node's listen IP, which its NodeIP resource reports.
func listenIPs(nodes []*Node) []netip.Addr {
	out := make([]netip.Addr, len(nodes))
	for i, n := range nodes {
		out[i] = n.listenIP
	}

	return out
}

// warmFleet makes one Version call per client so TLS handshakes and HTTP/2 set-up happen before timing.
func warmFleet(ctx context.Context, clients []*client.Client, ips []netip.Addr) error {
	return forEachParallel(len(clients), func(i int) error {
		if err := scaleCall(ctx, clients[i], ips[i], opVersion, 0); err != nil {
			return fmt.Errorf("warming node %d: %w", i, err)
		}

		return nil
	})
}

// memSample is the process's memory and goroutine use at one point.
type memSample struct {
	heapInuse  uint64
	stackInuse uint64
	sys        uint64
	goroutines int
}

// sampleMemory collects garbage and samples memory statistics and the goroutine count.
func sampleMemory() memSample {
	runtime.GC()
	runtime.GC() // a second cycle frees what the first one's finalizers released

	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)

	return memSample{heapInuse: ms.HeapInuse, stackInuse: ms.StackInuse, sys: ms.Sys, goroutines: runtime.NumGoroutine()}
}

// perNode is the growth from before to after divided over n nodes.
type perNode struct {
	bytes      float64 // heap in use + goroutine stacks
	heapBytes  float64
	sysBytes   float64 // memory obtained from the OS
	goroutines float64
}

// growthPerNode returns after-before per node; negative deltas (memory freed meanwhile) count as 0.
func growthPerNode(before, after memSample, n int) perNode {
	delta := func(a, b uint64) float64 {
		if a < b {
			return 0
		}

		return float64(a-b) / float64(n)
	}

	return perNode{
		bytes:      delta(after.heapInuse+after.stackInuse, before.heapInuse+before.stackInuse),
		heapBytes:  delta(after.heapInuse, before.heapInuse),
		sysBytes:   delta(after.sys, before.sys),
		goroutines: float64(after.goroutines-before.goroutines) / float64(n),
	}
}

// report records g as benchmark metrics, with prefix distinguishing idle from connected fleets.
func (g perNode) report(b *testing.B, prefix string) {
	b.ReportMetric(g.bytes, prefix+"bytes/node")
	b.ReportMetric(g.heapBytes, prefix+"heap-bytes/node")
	b.ReportMetric(g.sysBytes, prefix+"sys-bytes/node")
	b.ReportMetric(g.goroutines, prefix+"goroutines/node")
}

// writeHeapProfile writes the current heap profile to path (`go tool pprof -sample_index=inuse_space`).
func writeHeapProfile(tb testing.TB, path string) {
	tb.Helper()

	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}

	defer f.Close() //nolint:errcheck

	if err = pprof.WriteHeapProfile(f); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkNodeMemory starts TALOSSIM_BENCH_NODES (default 1,000) idle maintenance-mode nodes per
// iteration and reports the memory (heap in use plus goroutine stacks, heap alone, and memory obtained
// from the OS) and goroutines each one adds. ns/op is the time to start the whole fleet. Set
// TALOSSIM_BENCH_HEAPPROFILE to a path to get a heap profile taken while the fleet runs.
func BenchmarkNodeMemory(b *testing.B) {
	n := scaleNodeCount(b)

	ctx, cancel := context.WithTimeout(b.Context(), scaleTimeout)
	defer cancel()

	var sum perNode

	b.ResetTimer()

	for range b.N {
		b.StopTimer()

		before := sampleMemory()

		b.StartTimer()

		nodes, err := startFleet(ctx, n)
		if err != nil {
			b.Fatal(err)
		}

		b.StopTimer()

		g := growthPerNode(before, sampleMemory(), n)

		if path := os.Getenv(scaleHeapProfileEnv); path != "" {
			writeHeapProfile(b, path)
		}

		sum.bytes += g.bytes
		sum.heapBytes += g.heapBytes
		sum.sysBytes += g.sysBytes
		sum.goroutines += g.goroutines

		stopFleet(nodes)
		b.StartTimer()
	}

	b.StopTimer()

	iters := float64(b.N)
	perNode{sum.bytes / iters, sum.heapBytes / iters, sum.sysBytes / iters, sum.goroutines / iters}.report(b, "")
	b.ReportMetric(float64(n), "nodes")
}

// BenchmarkCallsThroughRealClient starts TALOSSIM_BENCH_NODES (default 1,000) maintenance-mode nodes with
// one real machinery client each, then issues calls from scaleCallers goroutines round-robin across the
// nodes and reports calls/s. The fleet is built once and shared by the sub-benchmarks (Version, the COSI
// NodeIP get, and both alternating); each also reports the per-node memory of the connected fleet
// (server and client side together).
func BenchmarkCallsThroughRealClient(b *testing.B) {
	n := scaleNodeCount(b)

	ctx, cancel := context.WithTimeout(b.Context(), scaleTimeout)
	defer cancel()

	before := sampleMemory()
	setupStart := time.Now()

	nodes, err := startFleet(ctx, n)
	if err != nil {
		b.Fatal(err)
	}

	b.Cleanup(func() { stopFleet(nodes) })

	clients, err := dialFleet(ctx, nodes)
	if err != nil {
		b.Fatal(err)
	}

	b.Cleanup(func() { closeClients(clients) }) // runs before stopFleet

	ips := listenIPs(nodes)

	if err = warmFleet(ctx, clients, ips); err != nil {
		b.Fatal(err)
	}

	connected := growthPerNode(before, sampleMemory(), n)
	b.Logf("%d nodes with connected clients ready in %s", n, time.Since(setupStart).Round(time.Millisecond))

	for _, bc := range []struct {
		name string
		op   scaleOp
	}{{"Version", opVersion}, {"NodeIP", opNodeIP}, {"mixed", opMixed}} {
		b.Run(bc.name, func(b *testing.B) {
			runScaleCalls(ctx, b, clients, ips, bc.op)
			connected.report(b, "conn-")
			b.ReportMetric(float64(n), "nodes")
		})
	}
}

// runScaleCalls issues b.N calls of kind op from scaleCallers goroutines, round-robin over clients, and
// reports calls/s.
func runScaleCalls(ctx context.Context, b *testing.B, clients []*client.Client, ips []netip.Addr, op scaleOp) {
	var (
		seq      atomic.Uint64
		failures atomic.Int64
		firstErr atomic.Pointer[error]
	)

	b.SetParallelism(max(1, scaleCallers/runtime.GOMAXPROCS(0)))
	b.ResetTimer()

	start := time.Now()

	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := seq.Add(1) - 1
			k := int(i % uint64(len(clients)))

			if err := scaleCall(ctx, clients[k], ips[k], op, i/uint64(len(clients))); err != nil {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, &err)
			}
		}
	})

	elapsed := time.Since(start)

	b.StopTimer()

	if p := firstErr.Load(); p != nil {
		b.Fatalf("%d of %d calls failed; first: %v", failures.Load(), b.N, *p)
	}

	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
}

// TestScaleHarnessSmoke runs the scale benchmarks' code paths with a few nodes and calls, so they keep
// working between benchmark runs.
func TestScaleHarnessSmoke(t *testing.T) {
	const nodeCount, rounds = 5, 4

	ctx := testContext(t)
	before := sampleMemory()

	nodes, err := startFleet(ctx, nodeCount)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { stopFleet(nodes) })

	if g := growthPerNode(before, sampleMemory(), nodeCount); g.goroutines < 1 {
		t.Errorf("idle node adds %.1f goroutines, want at least its accept loop", g.goroutines)
	}

	clients, err := dialFleet(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { closeClients(clients) })

	ips := listenIPs(nodes)

	if err = warmFleet(ctx, clients, ips); err != nil {
		t.Fatal(err)
	}

	// Every op kind, round-robin over the fleet from concurrent callers, as the benchmark issues them.
	var seq atomic.Uint64

	for _, op := range []scaleOp{opVersion, opNodeIP, opMixed} {
		err := forEachParallel(nodeCount*rounds, func(int) error {
			i := seq.Add(1) - 1
			k := int(i % nodeCount)

			return scaleCall(ctx, clients[k], ips[k], op, i/nodeCount)
		})
		if err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
	}

	// A call checked against another node's IP must fail: the check is what catches misrouted calls.
	if err := scaleCall(ctx, clients[0], netip.MustParseAddr("192.0.2.1"), opNodeIP, 0); err == nil {
		t.Error("NodeIP check accepted a wrong address")
	}

	// The fleet stops cleanly, and a stopped node's client then fails rather than hanging.
	closeClients(clients[:1])
	stopFleet(nodes[:1])

	c, err := dialFleet(ctx, nodes[:1])
	if err != nil {
		t.Fatal(err)
	}

	defer closeClients(c)

	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	if err := scaleCall(callCtx, c[0], ips[0], opVersion, 0); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("call to a stopped node: got %v, want a connection error", err)
	}
}
