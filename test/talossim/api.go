package talossim

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// drainGrace is how long a retiring API instance waits for in-flight calls (e.g. the ApplyConfiguration
// that triggered a reboot) before its connections are cut, like a reboot would.
const drainGrace = 2 * time.Second

// apiServer is one life of the node's apid: a gRPC server fed connections from the node's single listener.
// A new instance replaces the old one whenever apid would restart (leaving maintenance, after a reboot).
type apiServer struct {
	node        *Node
	maintenance bool
	gs          *grpc.Server
	lis         *chanListener
	retired     atomic.Bool
	down        chan struct{} // closed when the instance is retired, ending long-lived streams
	stopped     chan struct{}
}

// newAPIServer builds an API instance; maintenance fixes how callers' roles are derived for its life.
func (n *Node) newAPIServer(maintenance bool) *apiServer {
	a := &apiServer{
		node:        n,
		maintenance: maintenance,
		lis:         newChanListener(n.ln.Addr()),
		down:        make(chan struct{}),
		stopped:     make(chan struct{}),
	}

	a.gs = grpc.NewServer(
		grpc.Creds(credentials.NewTLS(n.tlsConfig())),
		grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize),
		grpc.ChainUnaryInterceptor(a.unaryInterceptor),
		grpc.ChainStreamInterceptor(a.streamInterceptor),
	)

	machine.RegisterMachineServiceServer(a.gs, &machineServer{node: n, api: a})
	machine.RegisterImageServiceServer(a.gs, &imageServer{node: n})
	machine.RegisterLifecycleServiceServer(a.gs, &lifecycleServer{node: n})
	cosiapi.RegisterStateServer(a.gs, server.NewState(state.WrapCore(state.Filter(n.st, accessPolicy(n.st)))))

	n.wg.Go(func() {
		defer close(a.stopped)

		_ = a.gs.Serve(a.lis) //nolint:errcheck // Serve only returns once the instance is stopped
	})

	return a
}

// retire makes the instance refuse new calls with Unavailable and shuts it down in the background: in-flight
// calls get drainGrace to finish, then every connection is closed.
func (n *Node) retire(a *apiServer) {
	if a == nil || a.retired.Swap(true) {
		return
	}

	close(a.down)

	n.wg.Go(func() {
		done := make(chan struct{})

		go func() {
			a.gs.GracefulStop()
			close(done)
		}()

		timer := time.NewTimer(drainGrace)
		defer timer.Stop()

		select {
		case <-done:
		case <-timer.C:
			a.gs.Stop()
			<-done
		case <-n.stopCh:
			a.gs.Stop()
			<-done
		}

		<-a.stopped
	})
}

// chanListener is a net.Listener whose connections are handed over by the node's accept loop.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// newChanListener returns an open chanListener reporting addr as its address.
func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// deliver hands c to the gRPC server; false means the listener is closed and c was not taken.
func (l *chanListener) deliver(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept implements net.Listener.
func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })

	return nil
}

// Addr implements net.Listener.
func (l *chanListener) Addr() net.Addr {
	return l.addr
}
