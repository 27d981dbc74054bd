package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writeResult is what a run of writes measured.
type writeResult struct {
	create, status latencies
	elapsed        time.Duration
}

// perSecond is the run's throughput in fully written objects (created, then
// status written) per second.
func (r *writeResult) perSecond() float64 {
	return float64(r.status.count()) / r.elapsed.Seconds()
}

// merge adds o's writes to r, as one run taking both runs' time.
func (r *writeResult) merge(o *writeResult) {
	r.create.merge(&o.create)
	r.status.merge(&o.status)
	r.elapsed += o.elapsed
}

// writeMachines creates n machines named <prefix>-<i> in ns, i from first,
// with the given number of concurrent clients, each one POSTed and then
// given its status through /status, as a controller discovering machines does.
func writeMachines(ctx context.Context, p *path, ns, prefix string, first, n, clients int) (*writeResult, error) {
	res := &writeResult{}
	var next atomic.Int64
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := writeMachine(ctx, p, ns, fmt.Sprintf("%s-%d", prefix, first+i), first+i, res); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return res, ctx.Err()
}

func writeMachine(ctx context.Context, p *path, ns, name string, i int, res *writeResult) error {
	want := machine(ns, name, i)
	t0 := time.Now()
	created, err := p.create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("%s: create %s/%s: %w", p.name, ns, name, err)
	}
	t1 := time.Now()
	created.Status = want.Status
	if _, err := p.updateStatus(ctx, created); err != nil {
		return fmt.Errorf("%s: write status of %s/%s: %w", p.name, ns, name, err)
	}
	res.create.add(t1.Sub(t0))
	res.status.add(time.Since(t1))
	return nil
}

// applyStatuses times n server-side applies, one after another, each moving
// the Ready condition of machine <prefix>-<i> in ns, i from first.
func applyStatuses(ctx context.Context, p *path, ns, prefix string, first, n int) (*latencies, error) {
	var l latencies
	for i := first; i < first+n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		body := readyCondition(p.gv.String(), name, i+1)
		t0 := time.Now()
		if err := p.applyStatus(ctx, ns, name, body); err != nil {
			return nil, fmt.Errorf("%s: apply status of %s/%s: %w", p.name, ns, name, err)
		}
		l.add(time.Since(t0))
	}
	return &l, nil
}
