package kubeletserving

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/talos"
)

// warmers is how many sessions an approver opens at once in the background.
const warmers = 4

// errNoCredentials: the reconcile has not handed the approver its
// credentials yet; it will.
var errNoCredentials = errors.New("no Talos credentials yet")

// sessions keeps one open Talos session per machine of a cluster, so that
// deciding a request reads its node's identity over a connection made
// before the request came: a TLS handshake per decision was most of the
// CPU a burst of requests cost, on both ends. Each decision still reads
// the node's identity at that moment, over its authenticated Talos API; a
// session whose read fails is closed, and the next read opens a new one.
//
// A session is opened with the approver's credentials of one generation;
// when they are renewed (half-way through their lifetime), every session
// is opened again with the new ones in the background, and one of an
// older generation is never used, so no session outlives the certificate
// it authenticated with.
type sessions struct {
	dialer  talos.Dialer
	timeout time.Duration
	// warm holds the addresses whose session is to be opened (again).
	warm workqueue.TypedInterface[string]

	mu sync.Mutex
	// creds and gen are the credentials sessions open with, and their
	// generation, counted from 1.
	creds talos.Credentials
	gen   uint64
	// wanted are the addresses of the cluster's machines.
	wanted map[string]bool
	open   map[string]*session
	// closed: the approver stopped; a session opened since is not kept.
	closed bool
}

// session is one open session with a node.
type session struct {
	// mu serialises calls: a talos.Node is not safe for concurrent use.
	mu   sync.Mutex
	node talos.Node
	gen  uint64
	// unowned: not kept, closed after its one use.
	unowned bool
}

func newSessions(dialer talos.Dialer, timeout time.Duration) *sessions {
	return &sessions{
		dialer: dialer, timeout: timeout,
		warm:   workqueue.NewTyped[string](),
		wanted: map[string]bool{},
		open:   map[string]*session{},
	}
}

// run opens sessions in the background until ctx ends, then closes them all.
func (s *sessions) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range warmers {
		wg.Go(func() {
			for {
				address, shutdown := s.warm.Get()
				if shutdown {
					return
				}
				s.prepare(ctx, address)
				s.warm.Done(address)
			}
		})
	}
	<-ctx.Done()
	s.warm.ShutDown()
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for address, cur := range s.open {
		go cur.close()
		delete(s.open, address)
	}
}

// setCredentials makes creds the credentials sessions open with, and opens
// every session again with them.
func (s *sessions) setCredentials(creds talos.Credentials) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creds = creds
	s.gen++
	for address := range s.wanted {
		s.warm.Add(address)
	}
}

// setAddresses makes addresses the machines' addresses: sessions of others
// are closed, and the new ones opened in the background.
func (s *sessions) setAddresses(addresses []string) {
	wanted := make(map[string]bool, len(addresses))
	for _, a := range addresses {
		if a != "" {
			wanted[a] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wanted = wanted
	for address, cur := range s.open {
		if !wanted[address] {
			delete(s.open, address)
			go cur.close()
		}
	}
	if s.gen == 0 {
		return // no credentials yet: setCredentials opens them
	}
	for address := range wanted {
		if s.open[address] == nil {
			s.warm.Add(address)
		}
	}
}

// get returns the session with address of the current credentials,
// opening one when there is none (fresh: nothing was read over it yet). A
// session that could not be kept (its address or the credentials changed
// while it was opened) is unowned: its caller closes it after one use.
func (s *sessions) get(ctx context.Context, address string) (sess *session, fresh bool, err error) {
	s.mu.Lock()
	cur, creds, gen, wanted := s.open[address], s.creds, s.gen, s.wanted[address]
	s.mu.Unlock()
	switch {
	case cur != nil && cur.gen == gen:
		return cur, false, nil
	case gen == 0:
		return nil, false, errNoCredentials
	case !wanted:
		return nil, false, fmt.Errorf("%s is no machine's address", address)
	}
	node, err := s.dialer.Configured(ctx, address, creds)
	if err != nil {
		return nil, false, err
	}
	sess = &session{node: node, gen: gen}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.wanted[address] || s.gen != gen || s.closed {
		sess.unowned = true
		return sess, true, nil
	}
	if old := s.open[address]; old != nil {
		go old.close()
	}
	s.open[address] = sess
	return sess, true, nil
}

// drop closes sess, and forgets it if it is address's.
func (s *sessions) drop(address string, sess *session) {
	s.mu.Lock()
	if s.open[address] == sess {
		delete(s.open, address)
	}
	s.mu.Unlock()
	sess.close()
}

// close closes the session once no call is under way on it.
func (sess *session) close() {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	_ = sess.node.Close()
}

// read reads the identity of the node over sess.
func (s *sessions) read(ctx context.Context, sess *session) (*talos.Identity, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.node.Identity(ctx)
}

// prepare opens the session with address, if it has none of the current
// credentials, and connects it with a read of the identity.
func (s *sessions) prepare(ctx context.Context, address string) {
	sess, fresh, err := s.get(ctx, address)
	if err != nil {
		log.FromContext(ctx).V(1).Info("Cannot open a Talos session", "address", address, "error", err.Error())
		return
	}
	if !fresh {
		return
	}
	if _, err := s.read(ctx, sess); err != nil || sess.unowned {
		s.drop(address, sess)
		if err != nil {
			log.FromContext(ctx).V(1).Info("Cannot read a node's identity", "address", address, "error", err.Error())
		}
	}
}

// identity reads the identity of the node at address over its session,
// opening one when there is none; a session whose read fails is closed.
func (s *sessions) identity(ctx context.Context, address string) (*talos.Identity, error) {
	sess, _, err := s.get(ctx, address)
	if err != nil {
		return nil, err
	}
	id, err := s.read(ctx, sess)
	if err != nil || sess.unowned {
		s.drop(address, sess)
	}
	return id, err
}
