package ui

import (
	"context"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
)

// TestEventStreamFramesEveryLine: each line of an event's data is a data
// field of its own, a lone CR ending a line too, so no text starts a field.
func TestEventStreamFramesEveryLine(t *testing.T) {
	rec := httptest.NewRecorder()
	if !(eventStream{newStream(rec)}).send("progress", []byte("<p>one\r\nretry: 1\revent: end</p>")) {
		t.Fatal("send failed")
	}
	want := "event: progress\ndata: <p>one\ndata: retry: 1\ndata: event: end</p>\n\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("sent %q, want %q", got, want)
	}
}

// TestLiveFollowEndsOrRestarts: a deleted operation ends the stream with
// an end event; a watch error on a version too old restarts the watch from
// now; any other error, or an operation of another cluster, ends it.
func TestLiveFollowEndsOrRestarts(t *testing.T) {
	ctx := context.Background()
	op := &v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "op"}, Spec: v1alpha1.TalosOperationSpec{ClusterName: "other"}}
	follow := func(rv string) (*liveFollow, *httptest.ResponseRecorder) {
		rec := httptest.NewRecorder()
		ow := &operationWatch{ops: fake.NewClientset().IchorV1alpha1().TalosOperations("ns"), opts: metav1.ListOptions{ResourceVersion: rv}}
		if err := ow.start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ow.stop)
		return &liveFollow{ns: "ns", name: "alpha", opName: "op", events: eventStream{newStream(rec)}, watch: ow}, rec
	}

	f, rec := follow("")
	if f.handle(ctx, watch.Event{Type: watch.Deleted, Object: op}) {
		t.Error("a deleted operation did not end the stream")
	}
	if want := "event: end\ndata: <p class=\"error\" role=\"alert\">This operation was deleted.</p>\n\n"; rec.Body.String() != want {
		t.Errorf("sent %q", rec.Body.String())
	}

	f, _ = follow("42")
	before := f.watch.watcher
	if !f.handle(ctx, watch.Event{Type: watch.Error, Object: &metav1.Status{Code: 410}}) {
		t.Error("a watch from a version too old ended instead of restarting")
	}
	if f.watch.watcher == before || f.watch.opts.ResourceVersion != "" {
		t.Errorf("the watch was not restarted from now: version %q", f.watch.opts.ResourceVersion)
	}
	if f.handle(ctx, watch.Event{Type: watch.Error, Object: &metav1.Status{Code: 500}}) {
		t.Error("a second watch error did not end the stream")
	}

	f, rec = follow("")
	if f.handle(ctx, watch.Event{Type: watch.Modified, Object: op}) || rec.Body.Len() != 0 {
		t.Errorf("an operation of another cluster was followed: %q", rec.Body.String())
	}
}
