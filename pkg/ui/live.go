package ui

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ichorv1alpha1 "ichor.dev/ichor/pkg/generated/clientset/versioned/typed/ichor/v1alpha1"
)

// liveHeartbeat is how often a live stream with nothing to say sends a
// comment, which keeps proxies from closing it.
const liveHeartbeat = 15 * time.Second

// liveOperation follows an operation with a watch as the person and sends
// its progress, rendered, as server-sent events (static/live.js puts each
// in the page). The stream ends when the operation does ("end"), when the
// session ends (sign-out, expiry), and at the session's renewal, so that a
// person whose sign-in ended stops seeing it: the browser reconnects
// through signedIn, which renews.
func (s *Server) liveOperation(w http.ResponseWriter, r *http.Request, se *session) {
	ns, name, opName := r.PathValue("namespace"), r.PathValue("name"), r.PathValue("operation")
	if !validNames(ns, name, opName) {
		http.NotFound(w, r)
		return
	}
	out := newStream(w)
	cs, ok := s.ichorClient(w, s.streamingAs(se))
	if !ok {
		return
	}
	until := se.renewAt
	if se.expires.Before(until) {
		until = se.expires
	}
	ctx, cancel := context.WithDeadline(r.Context(), until)
	defer cancel()
	// From the version the page shows (a reconnect asks the same), the
	// watch sends only what changed since; without one, or when that
	// version is too old to watch from, it starts with the operation as it
	// is now.
	ow := &operationWatch{ops: cs.IchorV1alpha1().TalosOperations(ns), opts: metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", opName).String(),
		ResourceVersion: r.URL.Query().Get("resourceVersion"),
	}}
	if err := ow.start(ctx); err != nil {
		http.Error(w, apiReason(err), apiStatus(err))
		return
	}
	defer ow.stop()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f := &liveFollow{s: s, r: r, se: se, ns: ns, name: name, opName: opName, events: eventStream{out}, watch: ow}
	// A browser whose stream ended (a renewal, a restart) reconnects after 2 s.
	if !f.events.write([]byte("retry: 2000\n\n")) {
		return
	}
	f.follow(ctx)
}

// operationWatch is the watch of one operation a live stream follows.
type operationWatch struct {
	ops     ichorv1alpha1.TalosOperationInterface
	opts    metav1.ListOptions
	watcher watch.Interface
}

// start watches from opts' version, or from now when that version is too
// old to watch from.
func (ow *operationWatch) start(ctx context.Context) error {
	var err error
	ow.watcher, err = ow.ops.Watch(ctx, ow.opts)
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.IsBadRequest(err) && ow.opts.ResourceVersion != "" {
		ow.opts.ResourceVersion = ""
		ow.watcher, err = ow.ops.Watch(ctx, ow.opts)
	}
	return err
}

// restart watches again from now, after the version the watch started
// from turned out too old (410 Gone).
func (ow *operationWatch) restart(ctx context.Context) error {
	ow.stop()
	ow.opts.ResourceVersion = ""
	var err error
	ow.watcher, err = ow.ops.Watch(ctx, ow.opts)
	return err
}

func (ow *operationWatch) stop() {
	if ow.watcher != nil {
		ow.watcher.Stop()
	}
}

// eventStream writes server-sent events.
type eventStream struct{ out *stream }

// write sends b as it is; false when the browser is gone.
func (e eventStream) write(b []byte) bool { return e.out.send(b) == nil }

// send sends data as one event of type event.
func (e eventStream) send(event string, data []byte) bool {
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\n", event)
	// A lone CR ends a line too: normalise, so that no text of a node
	// can start a field of its own.
	text := strings.ReplaceAll(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r", "\n")
	for line := range strings.SplitSeq(text, "\n") {
		fmt.Fprintf(&b, "data: %s\n", line)
	}
	b.WriteString("\n")
	return e.write(b.Bytes())
}

// liveFollow is one live stream of an operation's progress.
type liveFollow struct {
	s                *Server
	r                *http.Request
	se               *session
	ns, name, opName string
	events           eventStream
	watch            *operationWatch
	asked            bool   // whether the person may start it was asked
	startPath        string // where the fragments offer a start; "" offers none
}

// follow sends the operation's progress as it changes, and a heartbeat
// meanwhile, until the operation or the stream ends.
func (f *liveFollow) follow(ctx context.Context) {
	heartbeat := time.NewTicker(liveHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.se.ended:
			return
		case <-heartbeat.C:
			if !f.events.write([]byte(": still following\n\n")) {
				return
			}
		case ev, ok := <-f.watch.watcher.ResultChan():
			if !ok || !f.handle(ctx, ev) {
				return
			}
		}
	}
}

// handle sends what ev says of the operation; false ends the stream.
func (f *liveFollow) handle(ctx context.Context, ev watch.Event) bool {
	op, isOp := ev.Object.(*v1alpha1.TalosOperation)
	switch {
	case ev.Type == watch.Deleted:
		f.events.send("end", []byte(`<p class="error" role="alert">This operation was deleted.</p>`))
		return false
	case ev.Type == watch.Error && f.watch.opts.ResourceVersion != "":
		// The version is too old to watch from (410 Gone): start
		// again with the operation as it is now.
		return f.watch.restart(ctx) == nil
	case ev.Type == watch.Error || !isOp:
		return false
	case op.Spec.ClusterName != f.name:
		return false
	}
	return f.progress(op)
}

// progress sends the operation's progress, rendered; false once it ended.
func (f *liveFollow) progress(op *v1alpha1.TalosOperation) bool {
	if !f.asked { // once: the fragments offer a start to whoever may, as the page does
		f.asked = true
		if f.s.may(f.r, f.se, f.ns, "start", "talosoperations", string(op.Spec.Type)) {
			f.startPath = operationPath(f.ns, f.name, f.opName) + "/start"
		}
	}
	p := progressOf(op, f.startPath)
	var b bytes.Buffer
	if err := f.s.pages["operation"].ExecuteTemplate(&b, "progress", p); err != nil {
		klog.InfoS("rendering an operation's progress failed", "err", err)
		return false
	}
	event := "progress"
	if p.Ended {
		event = "end"
	}
	return f.events.send(event, b.Bytes()) && !p.Ended
}
