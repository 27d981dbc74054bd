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
	opts := metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", opName).String(),
		ResourceVersion: r.URL.Query().Get("resourceVersion"),
	}
	watcher, err := cs.IchorV1alpha1().TalosOperations(ns).Watch(ctx, opts)
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.IsBadRequest(err) && opts.ResourceVersion != "" {
		opts.ResourceVersion = ""
		watcher, err = cs.IchorV1alpha1().TalosOperations(ns).Watch(ctx, opts)
	}
	if err != nil {
		http.Error(w, apiReason(err), apiStatus(err))
		return
	}
	defer func() { watcher.Stop() }()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool { return out.send(b) == nil }
	send := func(event string, data []byte) bool {
		var b bytes.Buffer
		fmt.Fprintf(&b, "event: %s\n", event)
		// A lone CR ends a line too: normalise, so that no text of a node
		// can start a field of its own.
		text := strings.ReplaceAll(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r", "\n")
		for line := range strings.SplitSeq(text, "\n") {
			fmt.Fprintf(&b, "data: %s\n", line)
		}
		b.WriteString("\n")
		return write(b.Bytes())
	}
	// A browser whose stream ended (a renewal, a restart) reconnects after 2 s.
	if !write([]byte("retry: 2000\n\n")) {
		return
	}
	var (
		asked     bool
		startPath string
	)
	heartbeat := time.NewTicker(liveHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-se.ended:
			return
		case <-heartbeat.C:
			if !write([]byte(": still following\n\n")) {
				return
			}
		case ev, ok := <-watcher.ResultChan():
			if !ok {
				return
			}
			op, isOp := ev.Object.(*v1alpha1.TalosOperation)
			switch {
			case ev.Type == watch.Deleted:
				send("end", []byte(`<p class="error" role="alert">This operation was deleted.</p>`))
				return
			case ev.Type == watch.Error && opts.ResourceVersion != "":
				// The version is too old to watch from (410 Gone): start
				// again with the operation as it is now.
				watcher.Stop()
				opts.ResourceVersion = ""
				if watcher, err = cs.IchorV1alpha1().TalosOperations(ns).Watch(ctx, opts); err != nil {
					return
				}
				continue
			case ev.Type == watch.Error || !isOp:
				return
			case op.Spec.ClusterName != name:
				return
			}
			if !asked { // once: the fragments offer a start to whoever may, as the page does
				asked = true
				if s.may(r, se, ns, "start", "talosoperations", string(op.Spec.Type)) {
					startPath = operationPath(ns, name, opName) + "/start"
				}
			}
			p := progressOf(op, startPath)
			var b bytes.Buffer
			if err := s.pages["operation"].ExecuteTemplate(&b, "progress", p); err != nil {
				klog.InfoS("rendering an operation's progress failed", "err", err)
				return
			}
			event := "progress"
			if p.Ended {
				event = "end"
			}
			if !send(event, b.Bytes()) || p.Ended {
				return
			}
		}
	}
}
