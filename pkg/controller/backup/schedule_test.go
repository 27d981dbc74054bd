package backup

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/statusapply/statusapplytest"
	"ichor.dev/ichor/pkg/wakeup"
)

var t0 = time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)

// record is a scheduled backup that ended in phase at t0+completed.
func record(name string, phase v1alpha1.BackupPhase, completed time.Duration) *v1alpha1.TalosBackup {
	at := metav1.NewTime(t0.Add(completed))
	return &v1alpha1.TalosBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       v1alpha1.TalosBackupSpec{ClusterName: "prod", ScheduledAt: &at},
		Status:     v1alpha1.TalosBackupStatus{Phase: phase, CompletedAt: &metav1.MicroTime{Time: at.Time}},
	}
}

// byHand is a backup someone created, which ended in phase at t0+completed.
func byHand(name string, phase v1alpha1.BackupPhase, completed time.Duration) *v1alpha1.TalosBackup {
	b := record(name, phase, completed)
	b.Spec.ScheduledAt = nil
	return b
}

// TestPrune: retention keeps what every set limit keeps, measured from the
// newest success; a failing schedule deletes nothing.
func TestPrune(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	count := func(n int32) *int32 { return &n }
	for _, c := range []struct {
		name    string
		ret     v1alpha1.BackupRetention
		backups []*v1alpha1.TalosBackup
		kept    []string
	}{
		{
			name: "count keeps the newest successes and the failures after the oldest kept",
			ret:  v1alpha1.BackupRetention{Count: count(2)},
			backups: []*v1alpha1.TalosBackup{
				record("a", v1alpha1.BackupSucceeded, 0), record("b", v1alpha1.BackupFailed, day),
				record("c", v1alpha1.BackupSucceeded, 2*day), record("d", v1alpha1.BackupFailed, 3*day),
				record("e", v1alpha1.BackupSucceeded, 4*day), record("f", v1alpha1.BackupRunning, 0),
			},
			kept: []string{"c", "d", "e", "f"},
		},
		{
			name: "maxAge is measured from the newest success, not from now",
			ret:  v1alpha1.BackupRetention{MaxAge: &metav1.Duration{Duration: 36 * time.Hour}},
			backups: []*v1alpha1.TalosBackup{
				record("a", v1alpha1.BackupSucceeded, 0), record("b", v1alpha1.BackupSucceeded, day),
				record("c", v1alpha1.BackupSucceeded, 2*day), record("late-failure", v1alpha1.BackupFailed, 30*day),
			},
			kept: []string{"b", "c", "late-failure"},
		},
		{
			name: "both limits: the newest success is kept even outside maxAge",
			ret:  v1alpha1.BackupRetention{Count: count(5), MaxAge: &metav1.Duration{Duration: time.Hour}},
			backups: []*v1alpha1.TalosBackup{
				record("a", v1alpha1.BackupSucceeded, 0), record("b", v1alpha1.BackupSucceeded, day),
			},
			kept: []string{"b"},
		},
		{
			name: "no success: nothing is deleted",
			ret:  v1alpha1.BackupRetention{Count: count(1)},
			backups: []*v1alpha1.TalosBackup{
				record("a", v1alpha1.BackupFailed, 0), record("b", v1alpha1.BackupFailed, day),
			},
			kept: []string{"a", "b"},
		},
		{
			name: "backups made by hand are not the retention's",
			ret:  v1alpha1.BackupRetention{Count: count(1)},
			backups: []*v1alpha1.TalosBackup{
				byHand("before-upgrade", v1alpha1.BackupSucceeded, 0), byHand("x1", v1alpha1.BackupSucceeded, 2*day),
				byHand("x2", v1alpha1.BackupSucceeded, 3*day), record("a", v1alpha1.BackupSucceeded, day),
				record("b", v1alpha1.BackupSucceeded, 4*day),
			},
			kept: []string{"b", "before-upgrade", "x1", "x2"},
		},
		{
			name: "at most ten failed backups are kept, the newest",
			ret:  v1alpha1.BackupRetention{Count: count(1)},
			backups: func() []*v1alpha1.TalosBackup {
				var bs []*v1alpha1.TalosBackup
				for i := range 12 {
					bs = append(bs, record(fmt.Sprintf("f%02d", i), v1alpha1.BackupFailed, time.Duration(i)*time.Minute))
				}
				return bs
			}(),
			kept: []string{"f02", "f03", "f04", "f05", "f06", "f07", "f08", "f09", "f10", "f11"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var objs []client.Object
			var items []v1alpha1.TalosBackup
			for _, b := range c.backups {
				objs = append(objs, b.DeepCopy())
				items = append(items, *b)
			}
			cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
			s := &Scheduler{Client: cl, Recorder: eventstest.New(t, 100), Clock: clocktesting.NewFakeClock(t0.Add(100 * day))}
			cluster := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod"}}
			s.prune(context.Background(), cluster, c.ret, items)
			var left v1alpha1.TalosBackupList
			if err := cl.List(context.Background(), &left); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, b := range left.Items {
				names = append(names, b.Name)
			}
			slices.Sort(names)
			if !slices.Equal(names, c.kept) {
				t.Fatalf("kept %v, want %v", names, c.kept)
			}
		})
	}
}

func TestScheduledNameIsStableAndValid(t *testing.T) {
	at := time.Date(2026, 12, 4, 4, 30, 59, 0, time.FixedZone("CET", 3600))
	if got := ScheduledName("prod", at); got != "prod-20261204-0330" {
		t.Fatalf("ScheduledName = %q", got)
	}
	// Room stays for the five characters of a generated name's suffix, and
	// a cut name does not end in a dash.
	long := strings.Repeat("a", 200) + strings.Repeat("-b", 30)
	got := ScheduledName(long, at)
	if len(got) > 253-6 || strings.Contains(got, "--") {
		t.Fatalf("a long cluster name gives %q (%d characters)", got, len(got))
	}
}

// TestTheScheduleRunsOnItsClock: the next run is waited for on the
// scheduler's clock, so moving that clock to the run's minute brings the
// scheduler back, and not a second before.
func TestTheScheduleRunsOnItsClock(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 4, 30, 0, 0, time.UTC)
	cluster := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod", CreationTimestamp: metav1.NewTime(t0.Add(-10 * time.Minute))},
		Spec:       v1alpha1.TalosClusterSpec{Backup: &v1alpha1.ClusterBackup{Schedule: "0 * * * *"}},
	}
	c, _ := statusapplytest.Client(t, cluster)
	clock := clocktesting.NewFakeClock(t0)
	s := &Scheduler{Client: c, APIReader: c, Recorder: eventstest.New(t, 10), Clock: clock, wake: wakeup.New(clock)}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := s.wake.Source().Start(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cluster)}
	backups := func() []string {
		var l v1alpha1.TalosBackupList
		if err := c.List(t.Context(), &l); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, b := range l.Items {
			names = append(names, b.Name)
		}
		return names
	}

	if _, err := s.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := backups(); len(got) != 0 {
		t.Fatalf("no run was due at 04:30, yet: %v", got)
	}
	clock.Step(30*time.Minute - time.Second)
	if q.Len() != 0 {
		t.Fatal("woke a second before the run")
	}
	clock.Step(time.Second)
	if q.Len() != 1 {
		t.Fatal("did not wake at the run's minute")
	}
	if _, err := s.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got, want := backups(), []string{ScheduledName("prod", t0.Add(30*time.Minute))}; !slices.Equal(got, want) {
		t.Fatalf("backups %v, want %v", got, want)
	}
}
