package talossim

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// eventLogCapacity bounds the events a node keeps per boot; older ones are dropped first.
const eventLogCapacity = 1000

// eventIDEncoding renders 12-byte event IDs the way github.com/rs/xid does (lowercase base32hex, no
// padding), so IDs look like Talos's and sort by time.
var eventIDEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// eventIDCounter is the xid-style counter shared by all nodes of the process.
var eventIDCounter atomic.Uint32

// recordedEvent is one event of a node's runtime event stream.
type recordedEvent struct {
	msg *machine.Event
	at  time.Time
}

// eventLog is a node's runtime event buffer. Like machined's, it lives for one boot: reset empties it
// and ends the watches of the previous boot.
type eventLog struct {
	idBase [5]byte // xid machine ID + process ID, derived from the node

	mu      sync.Mutex
	epoch   uint64
	base    int // absolute position of events[0]
	events  []recordedEvent
	changed chan struct{} // closed and replaced on every change
	// prev are the events of the boot before, which its watchers still drain: what machined recorded
	// before apid went down had been sent.
	prev     []recordedEvent
	prevBase int
}

// newEventLog returns an empty log whose event IDs carry a node-specific part derived from seed.
func newEventLog(seed string) *eventLog {
	l := &eventLog{changed: make(chan struct{})}
	sum := sha256.Sum256([]byte("talossim events " + seed))
	copy(l.idBase[:], sum[:])

	return l
}

// newID returns an xid-style ID for an event at t.
func (l *eventLog) newID(t time.Time) string {
	var b [12]byte

	binary.BigEndian.PutUint32(b[0:4], uint32(t.Unix())) //nolint:gosec // xid stores 32-bit seconds
	copy(b[4:9], l.idBase[:])

	c := eventIDCounter.Add(1)
	b[9], b[10], b[11] = byte(c>>16), byte(c>>8), byte(c)

	return eventIDEncoding.EncodeToString(b[:])
}

// add records payload (a machine.*Event message) with actorID and wakes watchers.
func (l *eventLog) add(payload proto.Message, actorID string) {
	value, err := proto.Marshal(payload)
	if err != nil {
		log.Printf("talossim: encoding event: %v", err)

		return
	}

	now := time.Now()
	ev := &machine.Event{
		Data:    &anypb.Any{TypeUrl: "talos/runtime/" + string(payload.ProtoReflect().Descriptor().FullName()), Value: value},
		Id:      l.newID(now),
		ActorId: actorID,
	}

	l.mu.Lock()
	defer l.mu.Unlock()

	l.events = append(l.events, recordedEvent{msg: ev, at: now})

	if drop := len(l.events) - eventLogCapacity; drop > 0 {
		l.events = l.events[drop:]
		l.base += drop
	}

	l.notifyLocked()
}

// reset empties the log for a new boot.
func (l *eventLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()

	l.epoch++
	l.prev, l.prevBase = l.events, l.base
	l.base += len(l.events)
	l.events = nil
	l.notifyLocked()
}

// closedChan is a channel that is always ready.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)

	return c
}()

// notifyLocked wakes every watcher.
func (l *eventLog) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// eventCursor is a watcher's position in one boot's event stream.
type eventCursor struct {
	epoch uint64
	pos   int
}

// start positions a watch per the request, as machined does: new events only by default, the last
// TailEvents ones (all for a negative value), those after TailId, or those of the last TailSeconds.
func (l *eventLog) start(req *machine.EventsRequest) (eventCursor, error) {
	var tailID string

	if req.GetTailId() != "" {
		if b, err := eventIDEncoding.DecodeString(req.GetTailId()); err != nil || len(b) != 12 {
			return eventCursor{}, fmt.Errorf("error parsing tail_id: xid: invalid ID")
		}

		tailID = req.GetTailId()
	}

	l.mu.Lock()
	defer l.mu.Unlock()

	end := l.base + len(l.events)

	// first returns the position of the first event satisfying keep.
	first := func(keep func(recordedEvent) bool) int {
		for i, ev := range l.events {
			if keep(ev) {
				return l.base + i
			}
		}

		return end
	}

	pos := end

	switch {
	case req.GetTailEvents() < 0:
		pos = l.base
	case req.GetTailEvents() > 0:
		pos = max(end-int(req.GetTailEvents()), l.base)
	case tailID != "":
		pos = first(func(ev recordedEvent) bool { return ev.msg.GetId() > tailID })
	case req.GetTailSeconds() != 0:
		since := time.Now().Add(-time.Duration(req.GetTailSeconds()) * time.Second)
		pos = first(func(ev recordedEvent) bool { return ev.at.After(since) })
	}

	return eventCursor{epoch: l.epoch, pos: pos}, nil
}

// next returns the events after cur and advances it, plus a channel closed on the next change; ok is
// false once the boot (epoch) is over and its events delivered, or the watcher fell behind the buffer,
// which ends the watch.
func (l *eventLog) next(cur *eventCursor) (events []*machine.Event, changed <-chan struct{}, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()

	// A watcher of the boot before gets the rest of that boot's events, then its watch ends.
	if end := l.prevBase + len(l.prev); cur.epoch+1 == l.epoch && cur.pos >= l.prevBase && cur.pos < end {
		for _, ev := range l.prev[cur.pos-l.prevBase:] {
			events = append(events, ev.msg)
		}

		cur.pos = end

		return events, closedChan, true
	}

	if cur.epoch != l.epoch || cur.pos < l.base {
		return nil, nil, false
	}

	for _, ev := range l.events[cur.pos-l.base:] {
		events = append(events, ev.msg)
	}

	cur.pos = l.base + len(l.events)

	return events, l.changed, true
}

// Events streams the node's runtime events of the current boot: first an empty hello event, then the
// events selected by the tail options, then new ones until the client cancels or the API goes down.
// WithActorId keeps only that actor's events. The events recorded before the API went down are still
// delivered: on a real node apid outlives the machined events that announce its stop.
func (s *machineServer) Events(req *machine.EventsRequest, srv machine.MachineService_EventsServer) error {
	l := s.node.events

	if err := srv.Send(&machine.Event{Data: &anypb.Any{}, Id: l.newID(time.Now()), ActorId: req.GetWithActorId()}); err != nil {
		return err
	}

	cur, err := l.start(req)
	if err != nil {
		return err
	}

	// send sends the next events, reporting false once the boot is over.
	send := func() (<-chan struct{}, bool, error) {
		events, changed, ok := l.next(&cur)
		if !ok {
			return nil, false, nil
		}

		for _, ev := range events {
			if req.GetWithActorId() != "" && ev.GetActorId() != req.GetWithActorId() {
				continue
			}

			if err := srv.Send(ev); err != nil {
				return nil, false, err
			}
		}

		return changed, true, nil
	}

	for {
		changed, ok, err := send()
		if !ok || err != nil {
			return err
		}

		if err = s.waitStreamEnd(srv.Context(), changed); err != nil {
			if errors.Is(err, errAPIDown) {
				_, _, _ = send() // best effort: the stream ends with err anyway
			}

			return err
		}
	}
}

// machineStages maps simulator phases to the MachineStatus stage a real node reports in them.
var machineStages = map[Phase]runtime.MachineStage{
	PhaseMaintenance:  runtime.MachineStageMaintenance,
	PhaseInstalling:   runtime.MachineStageInstalling,
	PhaseRebooting:    runtime.MachineStageRebooting,
	PhaseRunning:      runtime.MachineStageRunning,
	PhaseUpgrading:    runtime.MachineStageUpgrading,
	PhaseResetting:    runtime.MachineStageResetting,
	PhaseShuttingDown: runtime.MachineStageShuttingDown,
	PhaseShutdown:     runtime.MachineStageShuttingDown,
}

// machineStatusEvent is the MachineStatusEvent machined emits when the machine stage changes.
func machineStatusEvent(p Phase) *machine.MachineStatusEvent {
	return &machine.MachineStatusEvent{
		Stage:  machine.MachineStatusEvent_MachineStage(machineStages[p]), //nolint:gosec // same enum values
		Status: &machine.MachineStatusEvent_MachineStatus{Ready: true},
	}
}
