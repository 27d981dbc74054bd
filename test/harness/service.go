package harness

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// service stands in for the Service in front of ichor-apiserver's replicas,
// as kube-proxy and readiness make one: each new connection goes to the
// next replica, in turn, that accepts it, and a replica that is down gets
// none. A connection stays with its replica until either end closes it,
// so a replica that dies breaks the connections it had, as a pod that dies
// does.
type service struct {
	ln net.Listener

	mu       sync.Mutex
	backends []string
	next     int
	// open are the live connections by backend.
	open map[string]map[net.Conn]struct{}
	wg   sync.WaitGroup
}

// dialTimeout bounds one attempt at a replica.
const dialTimeout = time.Second

// startService listens on addr and balances over backends.
func startService(addr string, backends []string) (*service, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &service{ln: ln, backends: backends, open: map[string]map[net.Conn]struct{}{}}
	s.wg.Go(s.serve)
	return s, nil
}

func (s *service) serve() {
	for {
		c, err := s.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		s.wg.Go(func() { s.forward(c) })
	}
}

// forward connects c with the next replica that answers, or closes it.
func (s *service) forward(c net.Conn) {
	s.mu.Lock()
	order := make([]string, 0, len(s.backends))
	for i := range s.backends {
		order = append(order, s.backends[(s.next+i)%len(s.backends)])
	}
	s.next++
	s.mu.Unlock()
	for _, b := range order {
		up, err := net.DialTimeout("tcp", b, dialTimeout)
		if err != nil {
			continue
		}
		s.track(b, up, true)
		defer s.track(b, up, false)
		done := make(chan struct{}, 2)
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			// Either side ending ends both, as a reset connection does.
			_ = dst.Close()
			_ = src.Close()
			done <- struct{}{}
		}
		go pipe(up, c)
		go pipe(c, up)
		<-done
		<-done
		return
	}
	_ = c.Close()
}

func (s *service) track(backend string, c net.Conn, open bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if open {
		if s.open[backend] == nil {
			s.open[backend] = map[net.Conn]struct{}{}
		}
		s.open[backend][c] = struct{}{}
		return
	}
	delete(s.open[backend], c)
}

// connections counts the live connections to backend.
func (s *service) connections(backend string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open[backend])
}

// close stops accepting and ends every connection.
func (s *service) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for _, conns := range s.open {
		for c := range conns {
			_ = c.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
}
