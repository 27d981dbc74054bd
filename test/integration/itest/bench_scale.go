package itest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/talossim"
)

func EnvInt(b testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

type ScaleResult struct {
	Configured, Ready Latencies
	Rss, PeakRSS      int64
}

// MachineTimes follows every TalosMachine of a namespace through one watch:
// when each was first seen pinned, ConfigApplied and Ready.
type MachineTimes struct {
	Mu                        sync.Mutex
	Pinned, Configured, Ready map[string]time.Time
}

func FollowMachines(ctx context.Context, b testing.TB, ns string) *MachineTimes {
	mt := &MachineTimes{Pinned: map[string]time.Time{}, Configured: map[string]time.Time{}, Ready: map[string]time.Time{}}
	informers := externalversions.NewSharedInformerFactoryWithOptions(APIClient(b), 0, externalversions.WithNamespace(ns))
	on := func(obj any) {
		if m, ok := obj.(*v1alpha1.TalosMachine); ok {
			mt.Record(m, time.Now())
		}
	}
	if _, err := informers.Ichor().V1alpha1().TalosMachines().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: on, UpdateFunc: func(_, obj any) { on(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	informers.Start(ctx.Done())
	b.Cleanup(informers.Shutdown)
	return mt
}

func (mt *MachineTimes) Record(m *v1alpha1.TalosMachine, now time.Time) {
	mt.Mu.Lock()
	defer mt.Mu.Unlock()
	first := func(at map[string]time.Time, yes bool) {
		if _, seen := at[m.Name]; yes && !seen {
			at[m.Name] = now
		}
	}
	first(mt.Pinned, m.Status.Maintenance != nil)
	first(mt.Configured, meta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied))
	first(mt.Ready, meta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.MachineConditionReady))
}

// Await waits until every machine of names has a time in at (which of pick).
func (mt *MachineTimes) Await(ctx context.Context, b testing.TB, what string, names []string, within time.Duration, pick func(*MachineTimes) map[string]time.Time) {
	b.Helper()
	var got int
	start := time.Now()
	last := start
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(context.Context) (bool, error) {
		mt.Mu.Lock()
		defer mt.Mu.Unlock()
		at := pick(mt)
		got = 0
		for _, n := range names {
			if _, ok := at[n]; ok {
				got++
			}
		}
		if time.Since(last) > 30*time.Second {
			b.Logf("%s: %d of %d after %v", what, got, len(names), time.Since(start).Round(time.Second))
			last = time.Now()
		}
		return got == len(names), nil
	})
	if err != nil {
		b.Fatalf("%s: %d of %d machines within %v: %v", what, got, len(names), within, err)
	}
	b.Logf("%s: all %d in %v", what, len(names), time.Since(start).Round(time.Millisecond))
}

// Since returns, for names, the time from start[name] to at[name].
func (mt *MachineTimes) Since(names []string, start map[string]time.Time, pick func(*MachineTimes) map[string]time.Time) Latencies {
	mt.Mu.Lock()
	defer mt.Mu.Unlock()
	at := pick(mt)
	var each []time.Duration
	var first, last time.Time
	for _, n := range names {
		each = append(each, at[n].Sub(start[n]))
		if first.IsZero() || start[n].Before(first) {
			first = start[n]
		}
		if at[n].After(last) {
			last = at[n]
		}
	}
	slices.Sort(each)
	return Latencies{P50: each[len(each)/2], P99: each[len(each)*99/100], All: last.Sub(first)}
}

func PinnedAt(mt *MachineTimes) map[string]time.Time     { return mt.Pinned }
func ConfiguredAt(mt *MachineTimes) map[string]time.Time { return mt.Configured }
func ReadyAt(mt *MachineTimes) map[string]time.Time      { return mt.Ready }

// Parallel runs f(i) for i in [0, n) on workers goroutines; the first error fails b.
func Parallel(b testing.TB, n, workers int, f func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

func ControllerScale(b testing.TB, clusters, perCluster int) ScaleResult {
	ctx, cancel := context.WithTimeout(b.Context(), 150*time.Minute)
	defer cancel()
	InstallControllerRBAC(ctx, b)
	ns := CP.Namespace(b)
	BindControllerSecrets(ctx, b, ns)
	binary, err := harness.BuildBinary(b.TempDir(), "ichor-controller")
	if err != nil {
		b.Fatal(err)
	}
	pprofAddr := FreeLoopbackAddress(b)
	controller := StartControllerBinary(b, binary, "ichor-controller", "--backup-volume-dir="+b.TempDir(), "--pprof-bind-address="+pprofAddr)
	api := APIClient(b).IchorV1alpha1()
	mt := FollowMachines(ctx, b, ns)

	// The clusters, each with an endpoint nothing listens on.
	clusterName := func(c int) string { return fmt.Sprintf("c%03d", c) }
	Parallel(b, clusters, 8, func(c int) error {
		_, err := api.TalosClusters(ns).Create(ctx, &v1alpha1.TalosCluster{
			ObjectMeta: metav1.ObjectMeta{Name: clusterName(c), Namespace: ns},
			Spec: v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
				ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: fmt.Sprintf("https://127.0.9.%d:6443", c%250+1)}},
		}, metav1.CreateOptions{})
		return err
	})

	// The nodes and their machines: n<cluster>-<index>, the control plane first.
	total := clusters * perCluster
	names, nodes := make([]string, total), make([]*talossim.Node, total)
	var old, fresh []string
	etcds, trustds := make([]*talossim.EtcdCluster, clusters), make([]*talossim.Trustd, clusters)
	for c := range clusters {
		etcds[c], trustds[c] = &talossim.EtcdCluster{Name: clusterName(c)}, talossim.NewTrustd()
	}
	// 127.16.0.1 and on.
	addr := func(i int) netip.Addr {
		v := 16<<16 | i + 1
		return netip.AddrFrom4([4]byte{127, byte(v >> 16), byte(v >> 8), byte(v)})
	}
	start := time.Now()
	Parallel(b, total, 4, func(i int) error {
		c, k := i/perCluster, i%perCluster
		names[i] = fmt.Sprintf("n%03d-%03d", c, k)
		n, err := talossim.Start(ctx, talossim.Options{ListenAddress: addr(i).String() + ":0", Etcd: etcds[c], Trustd: trustds[c],
			InstallDelay: 10 * time.Millisecond, RebootDelay: 10 * time.Millisecond})
		nodes[i] = n
		return err
	})
	b.Cleanup(func() {
		for _, n := range nodes {
			if n != nil {
				n.Stop()
			}
		}
	})
	for i, name := range names {
		if i%perCluster >= perCluster-perCluster/10 {
			fresh = append(fresh, name)
		} else {
			old = append(old, name)
		}
	}
	b.Logf("%d simulated nodes started in %v", total, time.Since(start).Round(time.Millisecond))

	create := func(which []string) {
		index := map[string]int{}
		for i, n := range names {
			index[n] = i
		}
		Parallel(b, len(which), 8, func(j int) error {
			i := index[which[j]]
			role := v1alpha1.MachineRoleWorker
			if i%perCluster == 0 {
				role = v1alpha1.MachineRoleControlPlane
			}
			_, err := api.TalosMachines(ns).Create(ctx, &v1alpha1.TalosMachine{
				ObjectMeta: metav1.ObjectMeta{Name: which[j], Namespace: ns},
				Spec: v1alpha1.TalosMachineSpec{ClusterName: clusterName(i / perCluster), Role: role, Address: nodes[i].Addr(),
					Hostname: which[j], Install: v1alpha1.InstallSpec{Disk: "/dev/sda"}},
			}, metav1.CreateOptions{})
			return err
		})
	}
	approve := func(which []string) map[string]time.Time {
		var mu sync.Mutex
		at := map[string]time.Time{}
		Parallel(b, len(which), 16, func(j int) error {
			m, err := api.TalosMachines(ns).Get(ctx, which[j], metav1.GetOptions{})
			if err != nil {
				return err
			}
			m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved}
			t0 := time.Now()
			if _, err := api.TalosMachines(ns).UpdateApproval(ctx, which[j], m, metav1.UpdateOptions{}); err != nil {
				return err
			}
			mu.Lock()
			at[which[j]] = t0
			mu.Unlock()
			return nil
		})
		return at
	}

	b.Logf("creating, approving and configuring %d machines", len(old))
	create(old)
	mt.Await(ctx, b, "old machines pinned", old, 30*time.Minute, PinnedAt)
	approve(old)
	mt.Await(ctx, b, "old machines Ready", old, 60*time.Minute, ReadyAt)

	b.Logf("creating %d new machines", len(fresh))
	create(fresh)
	mt.Await(ctx, b, "new machines pinned", fresh, 30*time.Minute, PinnedAt)
	before := ScrapeControllerMetrics(ctx, b, controller.Metrics)
	cpu0, err := proc.CPUTime(controller.Proc.Pid())
	if err != nil {
		b.Fatal(err)
	}
	profiled := make(chan struct{})
	go func() {
		defer close(profiled)
		ProfileController(ctx, b, pprofAddr)
	}()
	t0 := time.Now()
	approvedAt := approve(fresh)
	b.Logf("new machines: %d approvals written in %v", len(fresh), time.Since(t0).Round(time.Millisecond))
	mt.Await(ctx, b, "new machines configured", fresh, 30*time.Minute, ConfiguredAt)
	mt.Await(ctx, b, "new machines Ready", fresh, 30*time.Minute, ReadyAt)
	elapsed := time.Since(t0)
	cpu1, err := proc.CPUTime(controller.Proc.Pid())
	if err != nil {
		b.Fatal(err)
	}
	after := ScrapeControllerMetrics(ctx, b, controller.Metrics)
	<-profiled

	r := ScaleResult{Configured: mt.Since(fresh, approvedAt, ConfiguredAt), Ready: mt.Since(fresh, approvedAt, ReadyAt)}
	if r.Rss, err = proc.RSS(controller.Proc.Pid()); err != nil {
		b.Fatal(err)
	}
	if r.PeakRSS, err = proc.PeakRSS(controller.Proc.Pid()); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d clusters, %d machines; %d new: approved→configured p50 %v p99 %v, all in %v; approved→Ready p50 %v p99 %v, all in %v",
		clusters, total, len(fresh), r.Configured.P50.Round(time.Millisecond), r.Configured.P99.Round(time.Millisecond), r.Configured.All.Round(time.Millisecond),
		r.Ready.P50.Round(time.Millisecond), r.Ready.P99.Round(time.Millisecond), r.Ready.All.Round(time.Millisecond))
	b.Logf("controller: RSS %d MiB (peak %d MiB); CPU %v over the %v of the new machines' phase",
		r.Rss>>20, r.PeakRSS>>20, (cpu1 - cpu0).Round(time.Millisecond), elapsed.Round(time.Millisecond))
	LogMetricDeltas(b, before, after)
	return r
}

// ProfileController writes a 30-second CPU profile of the controller to
// $ICHOR_BENCH_SCALE_PROFILE, when it names a file.
func ProfileController(ctx context.Context, b testing.TB, addr string) {
	path := os.Getenv("ICHOR_BENCH_SCALE_PROFILE")
	if path == "" {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/profile?seconds=30", nil)
	if err != nil {
		b.Error(err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Errorf("the controller's profile: %v", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Errorf("the controller's profile: %s %v", resp.Status, err)
		return
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Error(err)
	}
}

// LogMetricDeltas logs where the controller's time went between two
// scrapes: per controller, the reconciles, their total time and the time
// items waited in the queue; per Talos call, the calls and their total time.
func LogMetricDeltas(b testing.TB, before, after string) {
	b.Helper()
	type key struct{ family, label string }
	sums := func(text string) map[key][2]float64 {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			b.Fatalf("parse the controller's metrics: %v", err)
		}
		out := map[key][2]float64{}
		for _, spec := range []struct{ family, label string }{
			{"controller_runtime_reconcile_time_seconds", "controller"},
			{"workqueue_queue_duration_seconds", "name"},
			{"ichor_talos_call_duration_seconds", "method"},
		} {
			f := families[spec.family]
			if f == nil {
				continue
			}
			for _, m := range f.GetMetric() {
				k := key{spec.family, LabelValue(m, spec.label)}
				v := out[k]
				v[0] += float64(m.GetHistogram().GetSampleCount())
				v[1] += m.GetHistogram().GetSampleSum()
				out[k] = v
			}
		}
		return out
	}
	b0, b1 := sums(before), sums(after)
	var keys []key
	for k := range b1 {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].family != keys[j].family {
			return keys[i].family < keys[j].family
		}
		return b1[keys[i]][1]-b0[keys[i]][1] > b1[keys[j]][1]-b0[keys[j]][1]
	})
	for _, k := range keys {
		n, sum := b1[k][0]-b0[k][0], b1[k][1]-b0[k][1]
		if n == 0 {
			continue
		}
		b.Logf("%s{%s}: %.0f, %.1f s in all, %.1f ms each", k.family, k.label, n, sum, 1000*sum/n)
	}
}

func LabelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
