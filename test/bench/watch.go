package bench

import (
	"context"
	"fmt"
	"sync"
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
func watchLatency(ctx context.Context, p *path, ns, prefix string, first, watchers, events int) (*latencies, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	list, _, err := p.list(ctx, ns, 1, "")
	if err != nil {
		return nil, fmt.Errorf("%s: list %s: %w", p.name, ns, err)
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
			return nil, fmt.Errorf("%s: watch %s: %w", p.name, ns, err)
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

	var l latencies
	for i := first; i < first+events; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		t0 := time.Now()
		if _, err := p.create(ctx, machine(ns, name, i), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("%s: create %s/%s: %w", p.name, ns, name, err)
		}
		deadline := time.After(eventTimeout)
		for seen := 0; seen < watchers; {
			select {
			case a := <-arrivals:
				if a.name != name {
					return nil, fmt.Errorf("%s: watcher saw %s while waiting for %s", p.name, a.name, name)
				}
				l.add(a.at.Sub(t0))
				seen++
			case err := <-failures:
				return nil, err
			case <-deadline:
				return nil, fmt.Errorf("%s: %d of %d watchers saw %s/%s within %s", p.name, seen, watchers, ns, name, eventTimeout)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return &l, nil
}
