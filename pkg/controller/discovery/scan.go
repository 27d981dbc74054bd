package discovery

import (
	"context"
	"iter"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/talos"
)

// scanner probes addresses for Talos nodes in maintenance mode, at a bounded
// rate and parallelism.
type scanner struct {
	dialer         talos.Dialer
	port           string
	rate           rate.Limit
	parallelism    int
	probeTimeout   time.Duration
	contactTimeout time.Duration
}

// scan contacts every address of addrs not in skip and returns the nodes
// that answered in maintenance mode. A node that does not accept a TCP
// connection on the Talos API port within probeTimeout costs nothing more;
// one that does is asked for its facts, observing its certificate.
func (s *scanner) scan(ctx context.Context, addrs iter.Seq[netip.Addr], skip func(address string) bool) []intake.Result {
	limiter := rate.NewLimiter(s.rate, 1)
	work := make(chan string)
	var (
		mu    sync.Mutex
		found []intake.Result
		wg    sync.WaitGroup
	)
	for range s.parallelism {
		wg.Go(func() {
			for address := range work {
				if r, ok := s.probe(ctx, address); ok {
					mu.Lock()
					found = append(found, r)
					mu.Unlock()
				}
			}
		})
	}
	for a := range addrs {
		address := net.JoinHostPort(a.String(), s.port)
		if skip(address) {
			continue
		}
		if limiter.Wait(ctx) != nil {
			break
		}
		select {
		case work <- address:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	return found
}

// probe contacts one address; ok is true for a node in maintenance mode.
func (s *scanner) probe(ctx context.Context, address string) (intake.Result, bool) {
	d := net.Dialer{Timeout: s.probeTimeout}
	conn, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return intake.Result{}, false
	}
	_ = conn.Close()
	ctx, cancel := context.WithTimeout(ctx, s.contactTimeout)
	defer cancel()
	r := intake.Contact(ctx, s.dialer, address, "", "")
	return r, r.Err == nil
}
