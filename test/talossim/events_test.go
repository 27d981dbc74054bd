package talossim

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// eventStream wraps an Events stream for tests.
type eventStream struct {
	t      *testing.T
	s      machineapi.MachineService_EventsClient
	cancel context.CancelFunc
}

// watchEvents opens an Events stream (cancelled at test end) and consumes the hello event, checking it
// carries the requested actor ID.
func watchEvents(t *testing.T, c *client.Client, opts ...client.EventsOptionFunc) *eventStream {
	t.Helper()

	ctx, cancel := context.WithCancel(testContext(t))
	t.Cleanup(cancel)

	s, err := c.Events(ctx, opts...)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}

	var req machineapi.EventsRequest
	for _, o := range opts {
		o(&req)
	}

	hello, err := s.Recv()
	if err != nil {
		t.Fatalf("hello event: %v", err)
	}

	if hello.GetData().GetTypeUrl() != "" || len(hello.GetId()) != 20 || hello.GetActorId() != req.GetWithActorId() {
		t.Fatalf("hello event = %v", hello)
	}

	return &eventStream{t: t, s: s, cancel: cancel}
}

// next receives and decodes the next event with the client's decoder.
func (e *eventStream) next() (*machineapi.Event, client.Event) {
	e.t.Helper()

	raw, err := e.s.Recv()
	if err != nil {
		e.t.Fatalf("receiving event: %v", err)
	}

	ev, err := client.UnmarshalEvent(raw)
	if err != nil {
		e.t.Fatalf("decoding event %v: %v", raw, err)
	}

	return raw, *ev
}

// wantStage receives a MachineStatusEvent with stage want.
func (e *eventStream) wantStage(want machineapi.MachineStatusEvent_MachineStage) *machineapi.Event {
	e.t.Helper()

	raw, ev := e.next()
	if ms, ok := ev.Payload.(*machineapi.MachineStatusEvent); !ok || ms.GetStage() != want || !ms.GetStatus().GetReady() {
		e.t.Fatalf("want machine stage %s, got %T %v", want, ev.Payload, ev.Payload)
	}

	return raw
}

// wantSequence receives a SequenceEvent START of sequence by actorID.
func (e *eventStream) wantSequence(sequence, actorID string) *machineapi.Event {
	e.t.Helper()

	raw, ev := e.next()
	if seq, ok := ev.Payload.(*machineapi.SequenceEvent); !ok || seq.GetSequence() != sequence ||
		seq.GetAction() != machineapi.SequenceEvent_START || ev.ActorID != actorID {
		e.t.Fatalf("want %s sequence by %s, got %T %v (actor %s)", sequence, actorID, ev.Payload, ev.Payload, ev.ActorID)
	}

	return raw
}

// wantService receives a ServiceStateEvent of service with action.
func (e *eventStream) wantService(service string, action machineapi.ServiceStateEvent_Action) *machineapi.Event {
	e.t.Helper()

	raw, ev := e.next()
	if svc, ok := ev.Payload.(*machineapi.ServiceStateEvent); !ok || svc.GetService() != service || svc.GetAction() != action {
		e.t.Fatalf("want %s %s, got %T %v", service, action, ev.Payload, ev.Payload)
	}

	return raw
}

// wantCancelled cancels the stream and checks it ends with Canceled.
func (e *eventStream) wantCancelled() {
	e.t.Helper()

	e.cancel()

	if _, err := e.s.Recv(); client.StatusCode(err) != codes.Canceled {
		e.t.Fatalf("after cancel: %v", err)
	}
}

func TestEvents(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{UpgradeDelay: testTimeout * 10})
	clients := roleClients(t, n, cl)

	// The buffer holds this boot's events: the node came up running.
	all := watchEvents(t, clients[role.Reader], client.WithTailEvents(-1))
	running := all.wantStage(machineapi.MachineStatusEvent_RUNNING)

	// New events reach the open watch.
	if err := admin.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}

	etcdUp := all.wantService("etcd", machineapi.ServiceStateEvent_RUNNING)

	resp, err := upgrade(ctx, admin, "siderolabs/installer:v1.13.1", false, false)
	if err != nil {
		t.Fatalf("Upgrade: %v", err)
	}

	actor := resp.GetMessages()[0].GetActorId()
	seq := all.wantSequence("upgrade", actor)
	all.wantStage(machineapi.MachineStatusEvent_UPGRADING)

	if !(running.GetId() < etcdUp.GetId() && etcdUp.GetId() < seq.GetId()) {
		t.Fatalf("event IDs do not sort in time order: %s %s %s", running.GetId(), etcdUp.GetId(), seq.GetId())
	}

	all.wantCancelled()

	// Tail options select from the same buffer.
	last2 := watchEvents(t, admin, client.WithTailEvents(2))
	last2.wantSequence("upgrade", actor)
	last2.wantStage(machineapi.MachineStatusEvent_UPGRADING)
	last2.wantCancelled()

	afterEtcd := watchEvents(t, admin, client.WithTailID(etcdUp.GetId()))
	afterEtcd.wantSequence("upgrade", actor)
	afterEtcd.wantStage(machineapi.MachineStatusEvent_UPGRADING)
	afterEtcd.wantCancelled()

	byActor := watchEvents(t, admin, client.WithTailEvents(-1), client.WithActorID(actor))
	byActor.wantSequence("upgrade", actor)
	byActor.wantCancelled()

	recent := watchEvents(t, admin, client.WithTailDuration(testTimeout))
	recent.wantStage(machineapi.MachineStatusEvent_RUNNING)
	recent.wantService("etcd", machineapi.ServiceStateEvent_RUNNING)
	recent.wantSequence("upgrade", actor)
	recent.wantStage(machineapi.MachineStatusEvent_UPGRADING)
	recent.wantCancelled()

	s, err := admin.Events(ctx, client.WithTailID("not-an-xid"))
	if err == nil {
		_, err = s.Recv() // hello
		if err == nil {
			_, err = s.Recv()
		}
	}

	wantCode(t, err, codes.Unknown, "error parsing tail_id")
}

func TestEventsEndWithTheAPI(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := installedNode(t, cl, Options{})

	w := watchEvents(t, admin)

	resp, err := admin.ShutdownWithResponse(ctx)
	if err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	actor := resp.GetMessages()[0].GetActorId()

	// Powering off takes the API down, so the stream ends with Unavailable. Before that it may carry the
	// shutdown sequence's start and the shutting-down stage, but nothing else; as on a real node,
	// whether they are delivered before the API goes away is a race.
	for {
		raw, err := w.s.Recv()
		if err != nil {
			wantCode(t, err, codes.Unavailable, "")

			break
		}

		ev, err := client.UnmarshalEvent(raw)
		if err != nil {
			t.Fatalf("decode event: %v", err)
		}

		switch p := ev.Payload.(type) {
		case *machineapi.SequenceEvent:
			if p.GetSequence() != "shutdown" || ev.ActorID != actor {
				t.Fatalf("unexpected sequence event during shutdown: %v (actor %s)", p, ev.ActorID)
			}
		case *machineapi.MachineStatusEvent:
			if p.GetStage() != machineapi.MachineStatusEvent_SHUTTING_DOWN {
				t.Fatalf("unexpected stage during shutdown: %v", p)
			}
		default:
			t.Fatalf("unexpected event during shutdown: %T %v", ev.Payload, ev.Payload)
		}
	}

	if n.Phase() != PhaseShutdown {
		t.Fatalf("phase = %s", n.Phase())
	}
}
