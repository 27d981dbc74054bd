package integration

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/talossim"
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
				r := approvalLatency(b, n, bursts, window)
				b.ReportMetric(ms(r.switchOn.p50), "switch-on-p50-ms")
				b.ReportMetric(ms(r.switchOn.p99), "switch-on-p99-ms")
				b.ReportMetric(ms(r.burst.p50), "burst-p50-ms")
				b.ReportMetric(ms(r.burst.p99), "burst-p99-ms")
				b.ReportMetric(ms(r.burst.all), "burst-all-ms")
				b.ReportMetric(ms(r.floor), "burst-floor-ms")
				b.ReportMetric(float64(r.burst.all)/float64(r.floor), "burst/floor")
				b.ReportMetric(ms(r.ideal.all), "burst-least-all-ms")
				b.ReportMetric(float64(r.burst.all)/float64(r.ideal.all), "burst/least")
				b.ReportMetric(ms(r.steady.p50), "steady-p50-ms")
				b.ReportMetric(ms(r.steady.p99), "steady-p99-ms")
			}
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// latencies are one round's figures: p50 and p99 from creation to
// approval, and from the first creation to the last approval.
type latencies struct{ p50, p99, all time.Duration }

type approvalRounds struct {
	switchOn, burst, steady latencies
	// ideal is the same burst decided by the least an approver does.
	ideal latencies
	floor time.Duration
}

// approvals follows every kubelet serving request of a cluster through a
// watch: when it was first seen, and first seen approved.
type approvals struct {
	mu                sync.Mutex
	created, approved map[string]time.Time
}

// No event is lost (watchRequests).
func watchApprovals(ctx context.Context, b *testing.B, wl kubernetes.Interface) *approvals {
	w := watchRequests(ctx, b, wl)
	b.Cleanup(w.Stop)
	a := &approvals{created: map[string]time.Time{}, approved: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			csr, ok := ev.Object.(*certv1.CertificateSigningRequest)
			if !ok || csr.Spec.SignerName != certv1.KubeletServingSignerName || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			a.mu.Lock()
			if _, seen := a.created[csr.Name]; !seen {
				a.created[csr.Name] = now
			}
			for _, c := range csr.Status.Conditions {
				if c.Type == certv1.CertificateApproved && c.Status == corev1.ConditionTrue {
					if _, seen := a.approved[csr.Name]; !seen {
						a.approved[csr.Name] = now
					}
				}
			}
			a.mu.Unlock()
		}
	}()
	return a
}

// round waits until every request named by include is approved (want of
// them) and returns its figures.
func (a *approvals) round(ctx context.Context, b *testing.B, what string, want int, wait time.Duration, include func(string) bool) latencies {
	b.Helper()
	var got int
	err := waitPoll(ctx, wait, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		got = 0
		for name := range a.approved {
			if include(name) {
				got++
			}
		}
		return got >= want
	})
	if err != nil {
		b.Fatalf("%s: %d of %d requests seen approved: %v", what, got, want, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var each []time.Duration
	var first, last time.Time
	for name, at := range a.approved {
		if !include(name) {
			continue
		}
		c := a.created[name]
		each = append(each, at.Sub(c))
		if first.IsZero() || c.Before(first) {
			first = c
		}
		if at.After(last) {
			last = at
		}
	}
	slices.Sort(each)
	l := latencies{p50: each[len(each)/2], p99: each[(len(each)*99)/100], all: last.Sub(first)}
	var lastCreated time.Time
	for name, c := range a.created {
		if include(name) && c.After(lastCreated) {
			lastCreated = c
		}
	}
	b.Logf("%s: created over %v", what, lastCreated.Sub(first).Round(time.Millisecond))
	b.Logf("%s: %d requests, created→approved p50 %v p99 %v max %v; first created to last approved %v",
		what, len(each), l.p50.Round(time.Millisecond), l.p99.Round(time.Millisecond), each[len(each)-1].Round(time.Millisecond), l.all.Round(time.Millisecond))
	return l
}

func waitPoll(ctx context.Context, timeout time.Duration, done func() bool) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return done(), nil })
}

func approvalLatency(b *testing.B, n, bursts int, window time.Duration) approvalRounds {
	ctx, cancel := context.WithTimeout(b.Context(), window+time.Duration(bursts)*5*time.Minute+40*time.Minute)
	defer cancel()
	installControllerRBAC(ctx, b)
	ns := cp.Namespace(b)
	bindControllerSecrets(ctx, b, ns)
	runController(b, func(o *ctrlcmd.Options) {
		o.MachineRecheckInterval = time.Minute // first contacts pin; rechecks would only add load
		o.MachineHealthInterval = time.Minute
		o.MachineConcurrency = 16
		o.KubeletServingPollInterval = time.Hour // only the approver's watch wakes it
	})
	nodes, kube, endpoint := benchCluster(ctx, b, ns, benchClusterSpec{name: "bench", endpointIP: "127.0.4.250", firstAddr: "127.0.5.0",
		controlPlanes: 1, workers: n - 1, rebootDelay: 10 * time.Millisecond})

	rc, err := kube.WaitReady(ctx, endpoint)
	if err != nil {
		b.Fatal(err)
	}
	wl := kubernetes.NewForConfigOrDie(rc)
	a := watchApprovals(ctx, b, wl)
	var out approvalRounds

	b.ResetTimer()
	mustKubectl(ctx, b, "-n", ns, "patch", "taloscluster", "bench", "--type=merge", "-p",
		`{"spec":{"security":{"kubeletServingCertificates":{"enabled":true}}}}`)
	waitClusterFor(ctx, b, ns, "bench", 20*time.Minute, v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionTrue, v1alpha1.ClusterReasonAllIssued)
	out.switchOn = a.round(ctx, b, "switch-on", n, time.Minute, func(name string) bool { return !strings.HasPrefix(name, "bench-") })

	// The kubelets' own requests, made ahead: a key and a request each, and
	// a connection to kube-apiserver, as a running kubelet has one.
	names := slices.Sorted(maps.Keys(nodes))
	var alls []string
	for i := range bursts {
		if i > 0 {
			// A minute apart: what else runs (health checks, the
			// machines' records) falls differently on each.
			select {
			case <-time.After(time.Minute):
			case <-ctx.Done():
				b.Fatal(ctx.Err())
			}
		}
		prefix := fmt.Sprintf("bench-burst%d-", i)
		what := fmt.Sprintf("burst %d of %d", i+1, bursts)
		reqs := kubeletRequests(ctx, b, rc, nodes, names, prefix, "")
		l := measuredBurst(ctx, b, a, what, prefix, "."+strconv.Itoa(i), reqs)
		alls = append(alls, l.all.Round(time.Millisecond).String())
		if l.all > out.burst.all {
			out.burst = l
		}
		if i == 0 {
			out.floor = approvalWriteFloor(ctx, b, wl, reqs)
		}
	}
	b.Logf("burst: the last approval after the first request, each round: %s; the slowest is reported", strings.Join(alls, ", "))
	b.Logf("burst: the last approval %v after the first request; %d approval writes straight to kube-apiserver took %v (ratio %.2f)",
		out.burst.all.Round(time.Millisecond), n, out.floor.Round(time.Millisecond), float64(out.burst.all)/float64(out.floor))
	out.ideal = idealBurst(ctx, b, rc, wl, nodes, names, a)
	b.Logf("burst: Ichor's last approval %v after the first request, the least approver's %v (ratio %.2f)",
		out.burst.all.Round(time.Millisecond), out.ideal.all.Round(time.Millisecond), float64(out.burst.all)/float64(out.ideal.all))

	steady := kubeletRequests(ctx, b, rc, nodes, names, "bench-steady-", "")
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	var wg sync.WaitGroup
	for _, r := range steady {
		at := time.Duration(rng.Int64N(int64(window)))
		wg.Go(func() {
			select {
			case <-time.After(at):
				r.create(ctx, b)
			case <-ctx.Done():
			}
		})
	}
	wg.Wait()
	out.steady = a.round(ctx, b, "steady", n, 5*time.Minute, func(name string) bool { return strings.HasPrefix(name, "bench-steady-") })
	b.StopTimer()
	return out
}

// kubeletRequest is a kubelet serving request of one node, made as its
// kubelet makes it, and a client acting as that node.
type kubeletRequest struct {
	csr    *certv1.CertificateSigningRequest
	client kubernetes.Interface
}

func (r *kubeletRequest) create(ctx context.Context, b *testing.B) {
	if _, err := r.client.CertificatesV1().CertificateSigningRequests().Create(ctx, r.csr, metav1.CreateOptions{}); err != nil {
		b.Error(err)
	}
}

// kubeletRequests makes one request per node, named prefix+machine, with
// the node's name (as+machine) and its address, from a client that
// impersonates the node (system:node:<name> in system:nodes), which is who
// the approver expects.
func kubeletRequests(ctx context.Context, b *testing.B, admin *rest.Config, nodes map[string]*talossim.Node, names []string, prefix, as string) (out []*kubeletRequest) {
	b.Helper()
	defer func() {
		// Connected ahead, 16 at a time: what is measured is the requests.
		var wg sync.WaitGroup
		slots := make(chan struct{}, 16)
		for _, r := range out {
			wg.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				if err := r.client.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}()
	out = make([]*kubeletRequest, 0, len(names))
	for _, name := range names {
		host, _, err := net.SplitHostPort(nodes[name].Addr())
		if err != nil {
			b.Fatal(err)
		}
		cfg := asNodeConfig(admin, as+name)
		cfg.QPS, cfg.Burst = -1, 0
		// A connection of its own, as each kubelet has: client-go shares one
		// transport between configurations that differ only in who they
		// impersonate, and a thousand requests at once over one connection
		// made the burst open hundreds more (a custom dialer opts out).
		cfg.Dial = (&net.Dialer{}).DialContext
		out = append(out, &kubeletRequest{
			client: kubernetes.NewForConfigOrDie(cfg),
			csr: &certv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: prefix + name},
				Spec: certv1.CertificateSigningRequestSpec{
					Request:    servingRequestPEM(b, as+name, host),
					SignerName: certv1.KubeletServingSignerName,
					Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
				},
			},
		})
	}
	return out
}

// measuredBurst creates reqs all at once, as their kubelets would, and
// returns the round's figures once every one (named prefix…) is approved.
// It logs what each process used of the CPU meanwhile (this process is the
// controller, ichor-apiserver, the nodes and the kubelets' clients; the
// children are both clusters' control planes), and with
// ICHOR_BENCH_BURST_PROFILE=file it profiles this process to file+suffix.
func measuredBurst(ctx context.Context, b *testing.B, a *approvals, what, prefix, suffix string, reqs []*kubeletRequest) latencies {
	b.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Go(func() {
			<-start
			r.create(ctx, b)
		})
	}
	cpuBefore, err := proc.TreeUsage(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	if f := os.Getenv("ICHOR_BENCH_BURST_PROFILE"); f != "" {
		pf, err := os.Create(f + suffix)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	close(start)
	wg.Wait()
	l := a.round(ctx, b, what, len(reqs), 5*time.Minute, func(name string) bool { return strings.HasPrefix(name, prefix) })
	if cpuAfter, err := proc.TreeUsage(os.Getpid()); err == nil {
		b.Logf("%s: CPU used meanwhile: %s", what, strings.Join(cpuAfter.Since(cpuBefore), ", "))
	}
	return l
}

// watchRequests follows the cluster's certificate signing requests from
// now on; the watch resumes where it was whenever kube-apiserver ends it
// (it ends a watcher that falls behind, as this process may in a burst),
// so no event is lost.
func watchRequests(ctx context.Context, b *testing.B, wl kubernetes.Interface) watch.Interface {
	b.Helper()
	csrs := wl.CertificatesV1().CertificateSigningRequests()
	list, err := csrs.List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return csrs.Watch(ctx, o) },
	})
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// idealBurst is the burst's anchor: the same burst (one request per node,
// made as its kubelet makes it, all at once) for nodes of no machine, which
// Ichor leaves pending, approved by the least an approver does: a watch of
// the requests and one approval write each, at Ichor's parallelism (64),
// without reading any node. Everything else the cluster does meanwhile
// (kube-controller-manager signing, the nodes, Ichor's controllers) is as
// in Ichor's burst.
func idealBurst(ctx context.Context, b *testing.B, admin *rest.Config, wl kubernetes.Interface, nodes map[string]*talossim.Node, names []string, a *approvals) latencies {
	b.Helper()
	const prefix = "bench-least-"
	// Node names of no machine: Ichor places no such request.
	reqs := kubeletRequests(ctx, b, admin, nodes, names, prefix, "least-")
	csrs := wl.CertificatesV1().CertificateSigningRequests()
	w := watchRequests(ctx, b, wl)
	defer w.Stop()
	work := make(chan *certv1.CertificateSigningRequest, len(reqs))
	var approvers sync.WaitGroup
	for range 64 {
		approvers.Go(func() {
			for csr := range work {
				csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{
					Type: certv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "LeastApprover", LastUpdateTime: metav1.Now(),
				})
				if _, err := csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
					b.Error(err)
				}
			}
		})
	}
	go func() {
		defer close(work)
		seen := 0
		for ev := range w.ResultChan() {
			csr, ok := ev.Object.(*certv1.CertificateSigningRequest)
			if !ok || ev.Type != watch.Added || !strings.HasPrefix(csr.Name, prefix) {
				continue
			}
			work <- csr
			if seen++; seen == len(reqs) {
				return
			}
		}
	}()
	l := measuredBurst(ctx, b, a, "least approver's burst", prefix, ".least", reqs)
	approvers.Wait()
	return l
}

// approvalWriteFloor is how long the cluster's kube-apiserver takes for
// one approval write per request, made at the approver's parallelism
// (each rewrites the Approved condition's message, so each is a write).
func approvalWriteFloor(ctx context.Context, b *testing.B, wl kubernetes.Interface, reqs []*kubeletRequest) time.Duration {
	b.Helper()
	csrs := make([]*certv1.CertificateSigningRequest, len(reqs))
	// Once kube-controller-manager signed them all, nothing else writes them.
	err := waitPoll(ctx, time.Minute, func() bool {
		for i, r := range reqs {
			csr, err := wl.CertificatesV1().CertificateSigningRequests().Get(ctx, r.csr.Name, metav1.GetOptions{})
			if err != nil || len(csr.Status.Certificate) == 0 {
				return false
			}
			for j := range csr.Status.Conditions {
				csr.Status.Conditions[j].Message += " (floor)"
			}
			csrs[i] = csr
		}
		return true
	})
	if err != nil {
		b.Fatalf("the burst's certificates were not all issued: %v", err)
	}
	work := make(chan *certv1.CertificateSigningRequest)
	var wg sync.WaitGroup
	start := time.Now()
	for range 64 { // the approver's parallelism
		wg.Go(func() {
			for csr := range work {
				if _, err := wl.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for _, csr := range csrs {
		work <- csr
	}
	close(work)
	wg.Wait()
	return time.Since(start)
}
