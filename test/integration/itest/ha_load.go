package itest

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

// APILoad is a bounded load on Ichor's API through kube-apiserver's
// aggregator, as clients make it while a part of Ichor fails: writers that
// create TalosClusters and update them, and watchers that follow them from
// a resourceVersion, resuming where they were whenever a watch ends (as
// client-go's informers do). A request that fails is tried once more,
// after retryAfter; one that fails again counts as failed. Each watcher
// must see every resourceVersion a write returned: one it never sees is a
// lost event.
type APILoad struct {
	T      testing.TB
	Ns     string
	Client versioned.Interface
	// RetryAfter is how long a failed request waits before its one retry;
	// beforeRetry, when set, is waited for as well (kube-apiserver back).
	RetryAfter  time.Duration
	BeforeRetry func(context.Context) error

	Sent, Failed, Retried atomic.Int64
	Errs                  sync.Map // first error of each kind, for the log

	Mu sync.Mutex
	// Written are the resourceVersions writes returned, by object.
	Written map[string][]string
	// Seen are what each watcher saw, by object: resourceVersions.
	Seen []map[string]map[string]bool
	// Resumed counts the watches each watcher opened after its first.
	Resumed []int

	// stopWrites ends the writers, cancel the watchers.
	StopWrites, Cancel context.CancelFunc
	Writers, Wg        sync.WaitGroup
}

// LoadFigures are what a fault test reports.
type LoadFigures struct {
	Sent, Failed, Retried, EventsLost, WatchResumes int
}

func (f LoadFigures) String() string {
	return fmt.Sprintf("requests sent %d, failed %d, retried %d; events lost %d (watches resumed %d times)",
		f.Sent, f.Failed, f.Retried, f.EventsLost, f.WatchResumes)
}

// StartAPILoad starts writers writing, one request after another each,
// and watchers watching, in ns.
func StartAPILoad(ctx context.Context, t testing.TB, ns string, writers, watchers int, retryAfter time.Duration) *APILoad {
	t.Helper()
	l := &APILoad{T: t, Ns: ns, Client: APIClient(t), RetryAfter: retryAfter, Written: map[string][]string{},
		Seen: make([]map[string]map[string]bool, watchers), Resumed: make([]int, watchers)}
	ctx, l.Cancel = context.WithCancel(ctx)
	clusters := l.Client.IchorV1alpha1().TalosClusters(ns)
	list, err := clusters.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range watchers {
		l.Seen[i] = map[string]map[string]bool{}
		opened := 0
		w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				l.Mu.Lock()
				if opened++; opened > 1 {
					l.Resumed[i]++
				}
				l.Mu.Unlock()
				return clusters.Watch(ctx, o)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		l.Wg.Go(func() {
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
						l.Note("watch", fmt.Errorf("a %s event of %T", ev.Type, ev.Object))
						continue
					}
					l.Mu.Lock()
					if l.Seen[i][c.Name] == nil {
						l.Seen[i][c.Name] = map[string]bool{}
					}
					l.Seen[i][c.Name][c.ResourceVersion] = true
					l.Mu.Unlock()
				}
			}
		})
	}
	writeCtx, stopWrites := context.WithCancel(ctx)
	l.StopWrites = stopWrites
	for w := range writers {
		l.Writers.Go(func() {
			ctx := writeCtx
			for n := 0; ctx.Err() == nil; n++ {
				name := fmt.Sprintf("load-%d-%d", w, n)
				if !l.Create(ctx, name) {
					continue
				}
				for round := range 2 {
					if ctx.Err() != nil {
						return
					}
					l.Update(ctx, name, round)
				}
			}
		})
	}
	return l
}

func (l *APILoad) Note(kind string, err error) {
	l.Errs.LoadOrStore(kind+": "+err.Error(), struct{}{})
}

// Do runs one request, and once more if it fails; it reports whether it
// succeeded. A request cut off by the end of the load counts as not sent.
func (l *APILoad) Do(ctx context.Context, what string, req func() error) bool {
	err := req()
	if err != nil && ctx.Err() == nil {
		l.Note(what, err)
		l.Retried.Add(1)
		select {
		case <-time.After(l.RetryAfter):
		case <-ctx.Done():
		}
		if l.BeforeRetry != nil && ctx.Err() == nil {
			_ = l.BeforeRetry(ctx)
		}
		err = req()
	}
	if ctx.Err() != nil {
		return false
	}
	l.Sent.Add(1)
	if err != nil {
		l.Failed.Add(1)
		l.Note(what+" after a retry", err)
		return false
	}
	return true
}

func (l *APILoad) Record(name, rv string) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	l.Written[name] = append(l.Written[name], rv)
}

func (l *APILoad) Create(ctx context.Context, name string) bool {
	clusters := l.Client.IchorV1alpha1().TalosClusters(l.Ns)
	obj := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.Ns},
		Spec: v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
			ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://127.0.9.1:6443"}},
	}
	return l.Do(ctx, "create", func() error {
		got, err := clusters.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// The first attempt was written, and its answer lost.
			got, err = clusters.Get(ctx, name, metav1.GetOptions{})
		}
		if err == nil {
			l.Record(name, got.ResourceVersion)
		}
		return err
	})
}

func (l *APILoad) Update(ctx context.Context, name string, round int) bool {
	clusters := l.Client.IchorV1alpha1().TalosClusters(l.Ns)
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{"ichor.test/round":"%d"}}}`, round)
	return l.Do(ctx, "update", func() error {
		// A retry of a write that was made changes nothing, and returns it.
		got, err := clusters.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			l.Record(name, got.ResourceVersion)
		}
		return err
	})
}

// Stop ends the load, once each watcher has seen every write (or wait
// passed), and returns its figures.
func (l *APILoad) Stop(timeout time.Duration) LoadFigures {
	l.T.Helper()
	missing := func() int {
		l.Mu.Lock()
		defer l.Mu.Unlock()
		lost := 0
		for i := range l.Seen {
			for name, rvs := range l.Written {
				for _, rv := range rvs {
					if !l.Seen[i][name][rv] {
						lost++
					}
				}
			}
		}
		return lost
	}
	// Writes stop first; the watchers then catch up.
	l.StopWrites()
	l.Writers.Wait()
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return missing() == 0, nil
	})
	lost := missing()
	l.Cancel()
	l.Wg.Wait()
	f := LoadFigures{Sent: int(l.Sent.Load()), Failed: int(l.Failed.Load()), Retried: int(l.Retried.Load()), EventsLost: lost}
	for _, n := range l.Resumed {
		f.WatchResumes += n
	}
	l.Errs.Range(func(k, _ any) bool {
		l.T.Logf("seen under load: %s", k)
		return true
	})
	return f
}
