package mgmtnode

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
)

// route is an address every pod can reach: a Service's cluster IP and
// port (also reachable from the host, where the aggregator dials
// APIServices), or a host address a test exposes to the pods. The node
// listens on it in its own namespace, where pods' traffic to it is routed.
type route struct {
	addr   string
	onHost bool
	dial   func(ctx context.Context) (net.Conn, error)
}

// network is the node's routes and the listeners that serve them in the
// node's namespace and, for Services, the host's ("").
type network struct {
	ctx    context.Context
	logf   func(string, ...any)
	mu     sync.Mutex
	routes map[string]route
	// listeners is, per namespace path, the listener of each route address.
	listeners map[string]map[string]net.Listener
}

func newNetwork(ctx context.Context, logf func(string, ...any), nodeNetns string) *network {
	return &network{ctx: ctx, logf: logf, routes: map[string]route{}, listeners: map[string]map[string]net.Listener{"": {}, nodeNetns: {}}}
}

// set adds or replaces a route, listening for it in every namespace it
// belongs in.
func (w *network) set(r route) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.routes[r.addr] = r
	var errs []error
	for ns, lns := range w.listeners {
		if ns == "" && !r.onHost {
			continue
		}
		if _, ok := lns[r.addr]; ok {
			continue
		}
		errs = append(errs, w.listen(ns, r.addr))
	}
	return errors.Join(errs...)
}

// remove drops the route at addr and closes its listeners.
func (w *network) remove(addr string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.routes, addr)
	for _, lns := range w.listeners {
		if ln, ok := lns[addr]; ok {
			_ = ln.Close()
			delete(lns, addr)
		}
	}
}

// close closes every listener.
func (w *network) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, lns := range w.listeners {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}
	w.listeners = map[string]map[string]net.Listener{}
}

// listen opens addr in namespace ns and forwards each connection to the
// route's current destination. w.mu is held.
func (w *network) listen(ns, addr string) error {
	var ln net.Listener
	var err error
	if ns == "" {
		ln, err = net.Listen("tcp", addr)
	} else {
		ln, err = listenIn(ns, addr)
	}
	if err != nil {
		return err
	}
	w.listeners[ns][addr] = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go w.forward(c, addr)
		}
	}()
	return nil
}

// forward joins an accepted connection to its route's destination; with
// no destination it closes it, as a connection to a Service without
// endpoints is refused.
func (w *network) forward(c net.Conn, addr string) {
	defer c.Close() //nolint:errcheck
	w.mu.Lock()
	r, ok := w.routes[addr]
	w.mu.Unlock()
	if !ok {
		return
	}
	up, err := r.dial(w.ctx)
	if err != nil {
		w.logf("%s: %v", addr, err)
		return
	}
	defer up.Close() //nolint:errcheck
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}
