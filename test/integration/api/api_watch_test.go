package api

import (
	"slices"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"ichor.dev/ichor/test/integration/itest"
)

func TestAPIWatchFromResourceVersion(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	machines := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns)

	// Created before the list: not part of the watch.
	if _, err := machines.Create(ctx, itest.APITalosMachine("before", ns, "alpha"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := machines.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := machines.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	// A second watch, filtered: it only sees machines of cluster beta.
	wBeta, err := machines.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, FieldSelector: "spec.clusterName=beta"})
	if err != nil {
		t.Fatalf("filtered watch: %v", err)
	}
	defer wBeta.Stop()

	created, err := machines.Create(ctx, itest.APITalosMachine("watched", ns, "alpha"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Spec.Hostname = "renamed"
	updated, err := machines.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := machines.Delete(ctx, "watched", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	beta, err := machines.Create(ctx, itest.APITalosMachine("beta-1", ns, "beta"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	want := []struct {
		typ        watch.EventType
		name, rv   string
		hostname   string
		generation int64
	}{
		{watch.Added, "watched", created.ResourceVersion, "", 1},
		{watch.Modified, "watched", updated.ResourceVersion, "renamed", 2},
		{watch.Deleted, "watched", "", "renamed", 2},
		{watch.Added, "beta-1", beta.ResourceVersion, "", 1},
	}
	for i, wnt := range want {
		typ, m := itest.APINextMachineEvent(t, w)
		if typ != wnt.typ || m.Name != wnt.name || m.Spec.Hostname != wnt.hostname || m.Generation != wnt.generation {
			t.Fatalf("event %d = %s %s hostname %q generation %d, want %s %s hostname %q generation %d",
				i, typ, m.Name, m.Spec.Hostname, m.Generation, wnt.typ, wnt.name, wnt.hostname, wnt.generation)
		}
		if wnt.rv != "" && m.ResourceVersion != wnt.rv {
			t.Errorf("event %d resourceVersion = %s, want %s", i, m.ResourceVersion, wnt.rv)
		}
	}
	typ, m := itest.APINextMachineEvent(t, wBeta)
	if typ != watch.Added || m.Name != "beta-1" {
		t.Errorf("filtered watch's first event = %s %s, want ADDED beta-1 (alpha machines filtered out)", typ, m.Name)
	}
}

func TestAPIWatchInitialEventsEndBookmark(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	machines := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns)
	initial := []string{"init-a", "init-b", "init-c"}
	for _, name := range initial {
		if _, err := machines.Create(ctx, itest.APITalosMachine(name, ns, "alpha"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	w, err := machines.Watch(ctx, metav1.ListOptions{
		SendInitialEvents:    ptr.To(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
	})
	if err != nil {
		t.Fatalf("watch with initial events: %v", err)
	}
	defer w.Stop()

	var added []string
	for {
		typ, m := itest.APINextMachineEvent(t, w)
		if typ == watch.Bookmark {
			if got := m.Annotations[metav1.InitialEventsAnnotationKey]; got != "true" {
				// An ordinary bookmark before the end of the initial events is allowed; keep reading.
				t.Logf("bookmark without %s before the initial events ended", metav1.InitialEventsAnnotationKey)
				continue
			}
			if m.ResourceVersion == "" {
				t.Errorf("initial-events-end bookmark has no resourceVersion")
			}
			break
		}
		if typ != watch.Added {
			t.Fatalf("initial event %s %s, want only ADDED before the bookmark", typ, m.Name)
		}
		added = append(added, m.Name)
	}
	sort.Strings(added)
	if !slices.Equal(added, initial) {
		t.Errorf("initial ADDED events = %v, want %v each once", added, initial)
	}

	// The watch goes on after the bookmark.
	if _, err := machines.Create(ctx, itest.APITalosMachine("after", ns, "alpha"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		typ, m := itest.APINextMachineEvent(t, w)
		if typ == watch.Bookmark {
			continue
		}
		if typ != watch.Added || m.Name != "after" {
			t.Fatalf("event after the initial ones = %s %s, want ADDED after", typ, m.Name)
		}
		break
	}
}
