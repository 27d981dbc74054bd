package bench

import (
	"context"
	"fmt"
	"time"
)

// listResult is what repeated LISTs of one namespace measured.
type listResult struct {
	full, paged latencies
	// bytes is the size of the full LIST response.
	bytes int
}

// merge adds o's LISTs to r.
func (r *listResult) merge(o *listResult) {
	r.full.merge(&o.full)
	r.paged.merge(&o.paged)
	r.bytes = o.bytes
}

// listMachines LISTs ns, which holds want machines, repeats times in full and
// repeats times page by page, timing each complete read including decoding.
func listMachines(ctx context.Context, p *path, ns string, want, pageSize, repeats int) (*listResult, error) {
	res := &listResult{}
	for range repeats {
		t0 := time.Now()
		list, size, err := p.list(ctx, ns, 0, "")
		if err != nil {
			return nil, fmt.Errorf("%s: list %s: %w", p.name, ns, err)
		}
		res.full.add(time.Since(t0))
		if len(list.Items) != want {
			return nil, fmt.Errorf("%s: list %s returned %d machines, want %d", p.name, ns, len(list.Items), want)
		}
		res.bytes = size
	}
	for range repeats {
		t0 := time.Now()
		got, cont := 0, ""
		for {
			list, _, err := p.list(ctx, ns, int64(pageSize), cont)
			if err != nil {
				return nil, fmt.Errorf("%s: list %s page: %w", p.name, ns, err)
			}
			got += len(list.Items)
			if cont = list.Continue; cont == "" {
				break
			}
		}
		res.paged.add(time.Since(t0))
		if got != want {
			return nil, fmt.Errorf("%s: paginated list %s returned %d machines, want %d", p.name, ns, got, want)
		}
	}
	return res, nil
}
