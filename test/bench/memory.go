package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// informerResult is what a typed informer over one namespace cost this process.
type informerResult struct {
	// heap is the live heap the synced cache added, measured after GC.
	heap int64
	// sync is the time from start until the cache held every object.
	sync time.Duration
}

// informerMemory starts a controller-runtime cache (a typed informer) for the
// TalosMachines of ns, waits until it holds want objects, and measures the
// live heap it added to this process.
func informerMemory(ctx context.Context, p *path, ns string, want int) (*informerResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	before := liveHeap()
	start := time.Now()
	c, err := cache.New(p.config, cache.Options{Scheme: p.scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return nil, fmt.Errorf("%s: cache: %w", p.name, err)
	}
	if _, err := c.GetInformer(ctx, &v1alpha1.TalosMachine{}); err != nil {
		return nil, fmt.Errorf("%s: informer: %w", p.name, err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("%s: cache of %s did not sync", p.name, ns)
	}
	res := &informerResult{sync: time.Since(start)}
	if got := cachedCount(ctx, c, ns); got != want {
		return nil, fmt.Errorf("%s: cache of %s holds %d machines, want %d", p.name, ns, got, want)
	}
	res.heap = liveHeap() - before
	runtime.KeepAlive(c)
	cancel()
	if err := <-done; err != nil {
		return nil, fmt.Errorf("%s: cache: %w", p.name, err)
	}
	return res, nil
}

// cachedCount is how many machines c holds; the copies List makes are garbage once it returns.
func cachedCount(ctx context.Context, c cache.Cache, ns string) int {
	var list v1alpha1.TalosMachineList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return -1
	}
	return len(list.Items)
}

// liveHeap is this process's live heap after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
