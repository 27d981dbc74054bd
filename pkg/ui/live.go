package ui

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// liveWriteTimeout bounds each write of a live stream: a browser that
// stops reading is let go.
const liveWriteTimeout = 30 * time.Second

// liveOperation follows an operation with a watch as the person and sends
// its progress, rendered, as server-sent events (static/live.js puts each
// in the page). The stream ends when the operation does ("end"), and at
// the session's renewal, so that a person whose sign-in ended stops
// seeing it: the browser reconnects through signedIn, which renews.
func (s *Server) liveOperation(w http.ResponseWriter, r *http.Request, se *session) {
	ns, name, opName := r.PathValue("namespace"), r.PathValue("name"), r.PathValue("operation")
	if !validNames(ns, name, opName) {
		http.NotFound(w, r)
		return
	}
	cs, err := versioned.NewForConfig(s.as(se.who))
	if err != nil {
		http.Error(w, "cannot reach the API", http.StatusInternalServerError)
		return
	}
	ctx, cancel := context.WithDeadline(r.Context(), se.renewAt)
	defer cancel()
	// Without a resourceVersion the watch starts with the operation as it
	// is now, then follows every change.
	watcher, err := cs.IchorV1alpha1().TalosOperations(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", opName).String(),
	})
	if err != nil {
		http.Error(w, apiReason(err), apiStatus(err))
		return
	}
	defer watcher.Stop()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(event string, data []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(liveWriteTimeout))
		var b bytes.Buffer
		fmt.Fprintf(&b, "event: %s\n", event)
		for line := range strings.SplitSeq(string(data), "\n") {
			fmt.Fprintf(&b, "data: %s\n", line)
		}
		b.WriteString("\n")
		if _, err := w.Write(b.Bytes()); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// A browser whose stream ended (a renewal, a restart) reconnects after 2 s.
	_ = rc.SetWriteDeadline(time.Now().Add(liveWriteTimeout))
	if _, err := w.Write([]byte("retry: 2000\n\n")); err != nil || rc.Flush() != nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-watcher.ResultChan():
			if !ok {
				return
			}
			op, isOp := ev.Object.(*v1alpha1.TalosOperation)
			switch {
			case ev.Type == watch.Deleted:
				send("end", []byte(`<p class="error" role="alert">This operation was deleted.</p>`))
				return
			case ev.Type == watch.Error || !isOp:
				return
			case op.Spec.ClusterName != name:
				return
			}
			p := progressOf(op)
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
