package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// eventTimeout bounds the wait for one write to reach every watcher.
const eventTimeout = 30 * time.Second

// watchLatency opens watchers watches on ns, then creates events machines
// named prefix-first, prefix-first+1, … one at a time and measures, for every watcher, the time from the start of the
// write to the arrival of its ADDED event. Each write waits until all
// watchers saw the previous one, so latencies do not queue behind each other.
// delivered, when not nil, counts the writes every watcher saw; cpu, when not
// nil, is sampled once the watches are open and again after the last write,
// and the difference returned.
func watchLatency(ctx context.Context, p *path, ns, prefix string, first, watchers, events int, delivered *atomic.Int64, cpu func() ([2]time.Duration, error)) (*latencies, [2]time.Duration, error) {
	var used [2]time.Duration
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	list, _, err := p.list(ctx, ns, 1, "")
	if err != nil {
		return nil, used, fmt.Errorf("%s: list %s: %w", p.name, ns, err)
	}
	type arrival struct {
		name string
		at   time.Time
	}
	arrivals := make(chan arrival, watchers*events)
	failures := make(chan error, watchers)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range watchers {
		w, err := p.watch(ctx, ns, list.ResourceVersion)
		if err != nil {
			return nil, used, fmt.Errorf("%s: watch %s: %w", p.name, ns, err)
		}
		wg.Go(func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Added:
					arrivals <- arrival{name: ev.Object.(*v1alpha1.TalosMachine).Name, at: time.Now()}
				case watch.Error:
					failures <- fmt.Errorf("%s: watch %s: %v", p.name, ns, ev.Object)
					return
				}
			}
		})
	}

	var before [2]time.Duration
	if cpu != nil {
		if before, err = cpu(); err != nil {
			return nil, used, err
		}
	}
	var l latencies
	for i := first; i < first+events; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		t0 := time.Now()
		if _, err := p.create(ctx, machine(ns, name, i), metav1.CreateOptions{}); err != nil {
			return nil, used, fmt.Errorf("%s: create %s/%s: %w", p.name, ns, name, err)
		}
		deadline := time.After(eventTimeout)
		for seen := 0; seen < watchers; {
			select {
			case a := <-arrivals:
				if a.name != name {
					return nil, used, fmt.Errorf("%s: watcher saw %s while waiting for %s", p.name, a.name, name)
				}
				l.add(a.at.Sub(t0))
				seen++
			case err := <-failures:
				return nil, used, err
			case <-deadline:
				return nil, used, fmt.Errorf("%s: %d of %d watchers saw %s/%s within %s", p.name, seen, watchers, ns, name, eventTimeout)
			case <-ctx.Done():
				return nil, used, ctx.Err()
			}
		}
		if delivered != nil {
			delivered.Add(1)
		}
	}
	if cpu != nil {
		after, err := cpu()
		if err != nil {
			return nil, used, err
		}
		for i := range used {
			used[i] = after[i] - before[i]
		}
	}
	return &l, used, nil
}
