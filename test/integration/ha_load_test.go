package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// apiLoad is a bounded load on Ichor's API through kube-apiserver's
// aggregator, as clients make it while a part of Ichor fails: writers that
// create TalosClusters and update them, and watchers that follow them from
// a resourceVersion, resuming where they were whenever a watch ends (as
// client-go's informers do). A request that fails is tried once more,
// after retryAfter; one that fails again counts as failed. Each watcher
// must see every resourceVersion a write returned: one it never sees is a
// lost event.
type apiLoad struct {
	t      testing.TB
	ns     string
	client versioned.Interface
	// retryAfter is how long a failed request waits before its one retry;
	// beforeRetry, when set, is waited for as well (kube-apiserver back).
	retryAfter  time.Duration
	beforeRetry func(context.Context) error

	sent, failed, retried atomic.Int64
	errs                  sync.Map // first error of each kind, for the log

	mu sync.Mutex
	// written are the resourceVersions writes returned, by object.
	written map[string][]string
	// seen are what each watcher saw, by object: resourceVersions.
	seen []map[string]map[string]bool
	// resumed counts the watches each watcher opened after its first.
	resumed []int

	// stopWrites ends the writers, cancel the watchers.
	stopWrites, cancel context.CancelFunc
	writers, wg        sync.WaitGroup
}

// loadFigures are what a fault test reports.
type loadFigures struct {
	Sent, Failed, Retried, EventsLost, WatchResumes int
}

func (f loadFigures) String() string {
	return fmt.Sprintf("requests sent %d, failed %d, retried %d; events lost %d (watches resumed %d times)",
		f.Sent, f.Failed, f.Retried, f.EventsLost, f.WatchResumes)
}

// startAPILoad starts writers writing, one request after another each,
// and watchers watching, in ns.
func startAPILoad(ctx context.Context, t testing.TB, ns string, writers, watchers int, retryAfter time.Duration) *apiLoad {
	t.Helper()
	l := &apiLoad{t: t, ns: ns, client: apiClient(t), retryAfter: retryAfter, written: map[string][]string{},
		seen: make([]map[string]map[string]bool, watchers), resumed: make([]int, watchers)}
	ctx, l.cancel = context.WithCancel(ctx)
	clusters := l.client.IchorV1alpha1().TalosClusters(ns)
	list, err := clusters.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range watchers {
		l.seen[i] = map[string]map[string]bool{}
		opened := 0
		w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				l.mu.Lock()
				if opened++; opened > 1 {
					l.resumed[i]++
				}
				l.mu.Unlock()
				return clusters.Watch(ctx, o)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		l.wg.Go(func() {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					c, isCluster := ev.Object.(*v1alpha1.TalosCluster)
					if !isCluster {
						l.note("watch", fmt.Errorf("a %s event of %T", ev.Type, ev.Object))
						continue
					}
					l.mu.Lock()
					if l.seen[i][c.Name] == nil {
						l.seen[i][c.Name] = map[string]bool{}
					}
					l.seen[i][c.Name][c.ResourceVersion] = true
					l.mu.Unlock()
				}
			}
		})
	}
	writeCtx, stopWrites := context.WithCancel(ctx)
	l.stopWrites = stopWrites
	for w := range writers {
		l.writers.Go(func() {
			ctx := writeCtx
			for n := 0; ctx.Err() == nil; n++ {
				name := fmt.Sprintf("load-%d-%d", w, n)
				if !l.create(ctx, name) {
					continue
				}
				for round := range 2 {
					if ctx.Err() != nil {
						return
					}
					l.update(ctx, name, round)
				}
			}
		})
	}
	return l
}

func (l *apiLoad) note(kind string, err error) {
	l.errs.LoadOrStore(kind+": "+err.Error(), struct{}{})
}

// do runs one request, and once more if it fails; it reports whether it
// succeeded. A request cut off by the end of the load counts as not sent.
func (l *apiLoad) do(ctx context.Context, what string, req func() error) bool {
	err := req()
	if err != nil && ctx.Err() == nil {
		l.note(what, err)
		l.retried.Add(1)
		select {
		case <-time.After(l.retryAfter):
		case <-ctx.Done():
		}
		if l.beforeRetry != nil && ctx.Err() == nil {
			_ = l.beforeRetry(ctx)
		}
		err = req()
	}
	if ctx.Err() != nil {
		return false
	}
	l.sent.Add(1)
	if err != nil {
		l.failed.Add(1)
		l.note(what+" after a retry", err)
		return false
	}
	return true
}

func (l *apiLoad) record(name, rv string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.written[name] = append(l.written[name], rv)
}

func (l *apiLoad) create(ctx context.Context, name string) bool {
	clusters := l.client.IchorV1alpha1().TalosClusters(l.ns)
	obj := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.ns},
		Spec: v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
			ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://127.0.9.1:6443"}},
	}
	return l.do(ctx, "create", func() error {
		got, err := clusters.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// The first attempt was written, and its answer lost.
			got, err = clusters.Get(ctx, name, metav1.GetOptions{})
		}
		if err == nil {
			l.record(name, got.ResourceVersion)
		}
		return err
	})
}

func (l *apiLoad) update(ctx context.Context, name string, round int) bool {
	clusters := l.client.IchorV1alpha1().TalosClusters(l.ns)
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{"ichor.test/round":"%d"}}}`, round)
	return l.do(ctx, "update", func() error {
		// A retry of a write that was made changes nothing, and returns it.
		got, err := clusters.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			l.record(name, got.ResourceVersion)
		}
		return err
	})
}

// stop ends the load, once each watcher has seen every write (or wait
// passed), and returns its figures.
func (l *apiLoad) stop(timeout time.Duration) loadFigures {
	l.t.Helper()
	missing := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		lost := 0
		for i := range l.seen {
			for name, rvs := range l.written {
				for _, rv := range rvs {
					if !l.seen[i][name][rv] {
						lost++
					}
				}
			}
		}
		return lost
	}
	// Writes stop first; the watchers then catch up.
	l.stopWrites()
	l.writers.Wait()
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return missing() == 0, nil
	})
	lost := missing()
	l.cancel()
	l.wg.Wait()
	f := loadFigures{Sent: int(l.sent.Load()), Failed: int(l.failed.Load()), Retried: int(l.retried.Load()), EventsLost: lost}
	for _, n := range l.resumed {
		f.WatchResumes += n
	}
	l.errs.Range(func(k, _ any) bool {
		l.t.Logf("seen under load: %s", k)
		return true
	})
	return f
}
