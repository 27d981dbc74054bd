package itest

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

func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Latencies are one round's figures: p50 and p99 from creation to
// approval, and from the first creation to the last approval.
type Latencies struct{ P50, P99, All time.Duration }

type ApprovalRounds struct {
	SwitchOn, Burst, Steady Latencies
	// Ideal is the same burst decided by the least an approver does.
	Ideal Latencies
	Floor time.Duration
}

// Approvals follows every kubelet serving request of a cluster through a
// watch: when it was first seen, and first seen approved.
type Approvals struct {
	Mu                sync.Mutex
	Created, Approved map[string]time.Time
}

// No event is lost (watchRequests).
func WatchApprovals(ctx context.Context, b *testing.B, wl kubernetes.Interface) *Approvals {
	w := WatchRequests(ctx, b, wl)
	b.Cleanup(w.Stop)
	a := &Approvals{Created: map[string]time.Time{}, Approved: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			csr, ok := ev.Object.(*certv1.CertificateSigningRequest)
			if !ok || csr.Spec.SignerName != certv1.KubeletServingSignerName || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			a.Mu.Lock()
			if _, seen := a.Created[csr.Name]; !seen {
				a.Created[csr.Name] = now
			}
			for _, c := range csr.Status.Conditions {
				if c.Type == certv1.CertificateApproved && c.Status == corev1.ConditionTrue {
					if _, seen := a.Approved[csr.Name]; !seen {
						a.Approved[csr.Name] = now
					}
				}
			}
			a.Mu.Unlock()
		}
	}()
	return a
}

// Round waits until every request named by include is approved (want of
// them) and returns its figures.
func (a *Approvals) Round(ctx context.Context, b *testing.B, what string, want int, wait time.Duration, include func(string) bool) Latencies {
	b.Helper()
	var got int
	err := WaitPoll(ctx, wait, func() bool {
		a.Mu.Lock()
		defer a.Mu.Unlock()
		got = 0
		for name := range a.Approved {
			if include(name) {
				got++
			}
		}
		return got >= want
	})
	if err != nil {
		b.Fatalf("%s: %d of %d requests seen approved: %v", what, got, want, err)
	}
	a.Mu.Lock()
	defer a.Mu.Unlock()
	var each []time.Duration
	var first, last time.Time
	for name, at := range a.Approved {
		if !include(name) {
			continue
		}
		c := a.Created[name]
		each = append(each, at.Sub(c))
		if first.IsZero() || c.Before(first) {
			first = c
		}
		if at.After(last) {
			last = at
		}
	}
	slices.Sort(each)
	l := Latencies{P50: each[len(each)/2], P99: each[(len(each)*99)/100], All: last.Sub(first)}
	var lastCreated time.Time
	for name, c := range a.Created {
		if include(name) && c.After(lastCreated) {
			lastCreated = c
		}
	}
	b.Logf("%s: created over %v", what, lastCreated.Sub(first).Round(time.Millisecond))
	b.Logf("%s: %d requests, created→approved p50 %v p99 %v max %v; first created to last approved %v",
		what, len(each), l.P50.Round(time.Millisecond), l.P99.Round(time.Millisecond), each[len(each)-1].Round(time.Millisecond), l.All.Round(time.Millisecond))
	return l
}

func WaitPoll(ctx context.Context, timeout time.Duration, done func() bool) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return done(), nil })
}

func ApprovalLatency(b *testing.B, n, bursts int, window time.Duration) ApprovalRounds {
	ctx, cancel := context.WithTimeout(b.Context(), window+time.Duration(bursts)*5*time.Minute+40*time.Minute)
	defer cancel()
	InstallControllerRBAC(ctx, b)
	ns := CP.Namespace(b)
	BindControllerSecrets(ctx, b, ns)
	RunController(b, func(o *ctrlcmd.Options) {
		o.MachineRecheckInterval = time.Minute // first contacts pin; rechecks would only add load
		o.MachineHealthInterval = time.Minute
		o.MachineConcurrency = 16
		o.KubeletServingPollInterval = time.Hour // only the approver's watch wakes it
	})
	nodes, kube, endpoint := BenchCluster(ctx, b, ns, BenchClusterSpec{Name: "bench", EndpointIP: "127.0.4.250", FirstAddr: "127.0.5.0",
		ControlPlanes: 1, Workers: n - 1, RebootDelay: 10 * time.Millisecond})

	rc, err := kube.WaitReady(ctx, endpoint)
	if err != nil {
		b.Fatal(err)
	}
	wl := kubernetes.NewForConfigOrDie(rc)
	a := WatchApprovals(ctx, b, wl)
	var out ApprovalRounds

	b.ResetTimer()
	MustKubectl(ctx, b, "-n", ns, "patch", "taloscluster", "bench", "--type=merge", "-p",
		`{"spec":{"security":{"kubeletServingCertificates":{"enabled":true}}}}`)
	WaitClusterFor(ctx, b, ns, "bench", 20*time.Minute, v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionTrue, v1alpha1.ClusterReasonAllIssued)
	out.SwitchOn = a.Round(ctx, b, "switch-on", n, time.Minute, func(name string) bool { return !strings.HasPrefix(name, "bench-") })

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
		reqs := KubeletRequests(ctx, b, rc, nodes, names, prefix, "")
		l := MeasuredBurst(ctx, b, a, what, prefix, "."+strconv.Itoa(i), reqs)
		alls = append(alls, l.All.Round(time.Millisecond).String())
		if l.All > out.Burst.All {
			out.Burst = l
		}
		if i == 0 {
			out.Floor = ApprovalWriteFloor(ctx, b, wl, reqs)
		}
	}
	b.Logf("burst: the last approval after the first request, each round: %s; the slowest is reported", strings.Join(alls, ", "))
	b.Logf("burst: the last approval %v after the first request; %d approval writes straight to kube-apiserver took %v (ratio %.2f)",
		out.Burst.All.Round(time.Millisecond), n, out.Floor.Round(time.Millisecond), float64(out.Burst.All)/float64(out.Floor))
	out.Ideal = IdealBurst(ctx, b, rc, wl, nodes, names, a)
	b.Logf("burst: Ichor's last approval %v after the first request, the least approver's %v (ratio %.2f)",
		out.Burst.All.Round(time.Millisecond), out.Ideal.All.Round(time.Millisecond), float64(out.Burst.All)/float64(out.Ideal.All))

	steady := KubeletRequests(ctx, b, rc, nodes, names, "bench-steady-", "")
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	var wg sync.WaitGroup
	for _, r := range steady {
		at := time.Duration(rng.Int64N(int64(window)))
		wg.Go(func() {
			select {
			case <-time.After(at):
				r.Create(ctx, b)
			case <-ctx.Done():
			}
		})
	}
	wg.Wait()
	out.Steady = a.Round(ctx, b, "steady", n, 5*time.Minute, func(name string) bool { return strings.HasPrefix(name, "bench-steady-") })
	b.StopTimer()
	return out
}

// KubeletRequest is a kubelet serving request of one node, made as its
// kubelet makes it, and a client acting as that node.
type KubeletRequest struct {
	CSR    *certv1.CertificateSigningRequest
	Client kubernetes.Interface
}

func (r *KubeletRequest) Create(ctx context.Context, b *testing.B) {
	if _, err := r.Client.CertificatesV1().CertificateSigningRequests().Create(ctx, r.CSR, metav1.CreateOptions{}); err != nil {
		b.Error(err)
	}
}

// KubeletRequests makes one request per node, named prefix+machine, with
// the node's name (as+machine) and its address, from a client that
// impersonates the node (system:node:<name> in system:nodes), which is who
// the approver expects.
func KubeletRequests(ctx context.Context, b *testing.B, admin *rest.Config, nodes map[string]*talossim.Node, names []string, prefix, as string) (out []*KubeletRequest) {
	b.Helper()
	defer func() {
		// Connected ahead, 16 at a time: what is measured is the requests.
		var wg sync.WaitGroup
		slots := make(chan struct{}, 16)
		for _, r := range out {
			wg.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				if err := r.Client.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}()
	out = make([]*KubeletRequest, 0, len(names))
	for _, name := range names {
		host, _, err := net.SplitHostPort(nodes[name].Addr())
		if err != nil {
			b.Fatal(err)
		}
		cfg := AsNodeConfig(admin, as+name)
		cfg.QPS, cfg.Burst = -1, 0
		// A connection of its own, as each kubelet has: client-go shares one
		// transport between configurations that differ only in who they
		// impersonate, and a thousand requests at once over one connection
		// made the burst open hundreds more (a custom dialer opts out).
		cfg.Dial = (&net.Dialer{}).DialContext
		out = append(out, &KubeletRequest{
			Client: kubernetes.NewForConfigOrDie(cfg),
			CSR: &certv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: prefix + name},
				Spec: certv1.CertificateSigningRequestSpec{
					Request:    ServingRequestPEM(b, as+name, host),
					SignerName: certv1.KubeletServingSignerName,
					Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
				},
			},
		})
	}
	return out
}

// MeasuredBurst creates reqs all at once, as their kubelets would, and
// returns the round's figures once every one (named prefix…) is approved.
// It logs what each process used of the CPU meanwhile (this process is the
// controller, ichor-apiserver, the nodes and the kubelets' clients; the
// children are both clusters' control planes), and with
// ICHOR_BENCH_BURST_PROFILE=file it profiles this process to file+suffix.
func MeasuredBurst(ctx context.Context, b *testing.B, a *Approvals, what, prefix, suffix string, reqs []*KubeletRequest) Latencies {
	b.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Go(func() {
			<-start
			r.Create(ctx, b)
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
	l := a.Round(ctx, b, what, len(reqs), 5*time.Minute, func(name string) bool { return strings.HasPrefix(name, prefix) })
	if cpuAfter, err := proc.TreeUsage(os.Getpid()); err == nil {
		b.Logf("%s: CPU used meanwhile: %s", what, strings.Join(cpuAfter.Since(cpuBefore), ", "))
	}
	return l
}

// WatchRequests follows the cluster's certificate signing requests from
// now on; the watch resumes where it was whenever kube-apiserver ends it
// (it ends a watcher that falls behind, as this process may in a burst),
// so no event is lost.
func WatchRequests(ctx context.Context, b *testing.B, wl kubernetes.Interface) watch.Interface {
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

// IdealBurst is the burst's anchor: the same burst (one request per node,
// made as its kubelet makes it, all at once) for nodes of no machine, which
// Ichor leaves pending, approved by the least an approver does: a watch of
// the requests and one approval write each, at Ichor's parallelism (64),
// without reading any node. Everything else the cluster does meanwhile
// (kube-controller-manager signing, the nodes, Ichor's controllers) is as
// in Ichor's burst.
func IdealBurst(ctx context.Context, b *testing.B, admin *rest.Config, wl kubernetes.Interface, nodes map[string]*talossim.Node, names []string, a *Approvals) Latencies {
	b.Helper()
	const prefix = "bench-least-"
	// Node names of no machine: Ichor places no such request.
	reqs := KubeletRequests(ctx, b, admin, nodes, names, prefix, "least-")
	csrs := wl.CertificatesV1().CertificateSigningRequests()
	w := WatchRequests(ctx, b, wl)
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
	l := MeasuredBurst(ctx, b, a, "least approver's burst", prefix, ".least", reqs)
	approvers.Wait()
	return l
}

// ApprovalWriteFloor is how long the cluster's kube-apiserver takes for
// one approval write per request, made at the approver's parallelism
// (each rewrites the Approved condition's message, so each is a write).
func ApprovalWriteFloor(ctx context.Context, b *testing.B, wl kubernetes.Interface, reqs []*KubeletRequest) time.Duration {
	b.Helper()
	csrs := make([]*certv1.CertificateSigningRequest, len(reqs))
	// Once kube-controller-manager signed them all, nothing else writes them.
	err := WaitPoll(ctx, time.Minute, func() bool {
		for i, r := range reqs {
			csr, err := wl.CertificatesV1().CertificateSigningRequests().Get(ctx, r.CSR.Name, metav1.GetOptions{})
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
