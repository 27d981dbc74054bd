package backup

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/schedule"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/events"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/statusapply"
	"ichor.dev/ichor/pkg/wakeup"
)

// SchedulerName names the scheduler in logs, metrics and Events.
const SchedulerName = "backupschedule"

// FieldManager owns status.backup and the BackupSucceeded condition of
// TalosClusters.
const FieldManager = v1alpha1.FieldManagerBackup

// maxFailedKept bounds the failed scheduled backups kept per cluster: a
// schedule that fails every minute must not fill etcd.
const maxFailedKept = 10

// Scheduler creates each cluster's TalosBackups on its schedule, prunes
// them to its retention, and reports the latest one on the cluster.
type Scheduler struct {
	// Client reads (cached) and writes Ichor objects.
	Client client.Client
	// APIReader reads the cluster uncached: its last schedule time decides
	// whether a run is due, and a stale one would bring back a pruned backup.
	APIReader client.Reader
	// Recorder records Events.
	Recorder events.EventRecorder
	// Clock tells when a run is due; nil is the wall clock. Tests move a
	// fake one rather than wait for the minute.
	Clock clock.WithDelayedExecution

	wake *wakeup.Source
}

// SetupWithManager registers the scheduler.
func (s *Scheduler) SetupWithManager(mgr ctrl.Manager) error {
	if s.Clock == nil {
		s.Clock = clock.RealClock{}
	}
	s.wake = wakeup.New(s.Clock)
	return ctrl.NewControllerManagedBy(mgr).
		Named(SchedulerName).
		For(&v1alpha1.TalosCluster{}).
		Watches(&v1alpha1.TalosBackup{}, clusterindex.EnqueueCluster()).
		WatchesRawSource(s.wake.Source()).
		Complete(s)
}

// Reconcile looks at one cluster's backups.
func (s *Scheduler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cluster v1alpha1.TalosCluster
	if err := s.APIReader.Get(ctx, req.NamespacedName, &cluster); err != nil {
		if apierrors.IsNotFound(err) {
			s.wake.Forget(req)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var list v1alpha1.TalosBackupList
	if err := s.Client.List(ctx, &list, clusterindex.InCluster(cluster.Namespace, cluster.Name)...); err != nil {
		return ctrl.Result{}, fmt.Errorf("list the backups of TalosCluster %s: %w", cluster.Name, err)
	}
	before := cluster.Status.DeepCopy()
	now := s.Clock.Now()

	setting := cluster.Spec.Backup
	if setting != nil && !setting.Suspend && cluster.DeletionTimestamp.IsZero() {
		sched, err := schedule.Parse(setting.Schedule, setting.TimeZone)
		if err != nil {
			// Admission refuses such a setting; one stored before a stricter
			// check is reported, not run.
			meta.SetStatusCondition(&cluster.Status.Conditions, metav1.Condition{Type: v1alpha1.ClusterConditionBackupSucceeded,
				Status: metav1.ConditionFalse, Reason: v1alpha1.BackupReasonInvalidSetting, Message: "spec.backup.schedule: " + err.Error()})
		} else {
			if err := s.schedule(ctx, &cluster, sched, now); err != nil {
				return ctrl.Result{}, err
			}
			s.wake.At(req, sched.Next(now))
		}
	}
	if setting != nil {
		s.prune(ctx, &cluster, setting.Retention, list.Items)
	}
	s.report(&cluster, list.Items)
	return ctrl.Result{}, s.writeStatus(ctx, &cluster, before)
}

// schedule creates the TalosBackup of the latest run time that passed
// since the last one it created (or since the cluster was created).
func (s *Scheduler) schedule(ctx context.Context, cluster *v1alpha1.TalosCluster, sched *schedule.Schedule, now time.Time) error {
	last := cluster.CreationTimestamp.Time
	if st := cluster.Status.Backup; st != nil && st.LastScheduleTime != nil {
		last = st.LastScheduleTime.Time
	}
	due := sched.Latest(last, now)
	if due.IsZero() {
		return nil
	}
	at := metav1.NewTime(due)
	b := &v1alpha1.TalosBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: ScheduledName(cluster.Name, due)},
		Spec:       v1alpha1.TalosBackupSpec{ClusterName: cluster.Name, ScheduledAt: &at},
	}
	err := s.Client.Create(ctx, b)
	if apierrors.IsAlreadyExists(err) {
		var held v1alpha1.TalosBackup
		if err := s.APIReader.Get(ctx, client.ObjectKeyFromObject(b), &held); err != nil {
			return fmt.Errorf("read TalosBackup %s: %w", b.Name, err)
		}
		if held.Spec.ClusterName == cluster.Name && held.Spec.ScheduledAt != nil && held.Spec.ScheduledAt.Equal(&at) {
			err = nil // created before a restart: this run exists
		} else {
			// Someone took the name by hand: the run gets another one.
			events.Record(s.Recorder, cluster, &held, v1alpha1.EventBackupNameTaken, "Schedule",
				"TalosBackup %s, created by hand, holds the name of the run at %s; that run gets a generated name", held.Name, due.UTC().Format(time.RFC3339))
			b.GenerateName, b.Name = b.Name+"-", ""
			if err = s.Client.Create(ctx, b); err == nil {
				events.Record(s.Recorder, cluster, b, v1alpha1.EventBackupScheduled, "Schedule", "created TalosBackup %s for %s", b.Name, due.UTC().Format(time.RFC3339))
			}
		}
	} else if err == nil {
		events.Record(s.Recorder, cluster, b, v1alpha1.EventBackupScheduled, "Schedule", "created TalosBackup %s for %s", b.Name, due.UTC().Format(time.RFC3339))
	}
	if err != nil {
		return fmt.Errorf("create the TalosBackup of the run at %s: %w", due.UTC().Format(time.RFC3339), err)
	}
	if cluster.Status.Backup == nil {
		cluster.Status.Backup = &v1alpha1.ClusterBackupStatus{}
	}
	t := metav1.NewTime(due)
	cluster.Status.Backup.LastScheduleTime = &t
	return nil
}

// ScheduledName is the name of the TalosBackup of cluster's run at t: the
// same for every attempt, so a restarted controller never creates a run twice.
func ScheduledName(cluster string, t time.Time) string {
	suffix := "-" + t.UTC().Format("20060102-1504")
	// Room for the generated suffix of a taken name, too.
	const maxName = 253 - 6
	if len(cluster)+len(suffix) > maxName {
		cluster = strings.TrimRight(cluster[:maxName-len(suffix)], "-.")
	}
	return cluster + suffix
}

// finished are the backups taken of the cluster that succeeded or failed
// and are not being deleted, the latest completed first. Uploaded
// snapshots are not among them: they say nothing of the cluster's backups.
func finished(backups []v1alpha1.TalosBackup) []*v1alpha1.TalosBackup {
	var out []*v1alpha1.TalosBackup
	for i := range backups {
		b := &backups[i]
		if b.DeletionTimestamp.IsZero() && b.Spec.Upload == nil && b.Status.CompletedAt != nil &&
			(b.Status.Phase == v1alpha1.BackupSucceeded || b.Status.Phase == v1alpha1.BackupFailed) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b *v1alpha1.TalosBackup) int {
		return cmp.Or(b.Status.CompletedAt.Compare(a.Status.CompletedAt.Time), cmp.Compare(b.Name, a.Name))
	})
	return out
}

// prune deletes the scheduled backups outside the retention (those created
// by hand stay until someone deletes them). It measures from the latest
// successful backup, not from now: only a newer successful backup moves the
// window, so a failing schedule never deletes the backups it could not
// replace. The latest successful backup is always kept, and a failed one is
// kept while it is newer than the oldest successful one kept, up to
// maxFailedKept.
func (s *Scheduler) prune(ctx context.Context, cluster *v1alpha1.TalosCluster, ret v1alpha1.BackupRetention, backups []v1alpha1.TalosBackup) {
	var done, succeeded, failed []*v1alpha1.TalosBackup
	for _, b := range finished(backups) {
		if b.Spec.ScheduledAt == nil {
			continue
		}
		done = append(done, b)
		if b.Status.Phase == v1alpha1.BackupSucceeded {
			succeeded = append(succeeded, b)
		} else {
			failed = append(failed, b)
		}
	}
	// Failed backups beyond the newest maxFailedKept go whatever else
	// happens: they are records of attempts (what one left on the target
	// goes with it, through the runner's finalizer).
	if len(failed) > maxFailedKept {
		for _, b := range failed[maxFailedKept:] {
			s.delete(ctx, cluster, b, fmt.Sprintf("more than %d failed backups are kept", maxFailedKept))
		}
	}
	if len(succeeded) == 0 {
		return
	}
	latest := succeeded[0].Status.CompletedAt.Time
	keep := map[string]bool{succeeded[0].Name: true}
	oldestKept := latest
	for i, b := range succeeded {
		inCount := ret.Count == nil || i < int(*ret.Count)
		inAge := ret.MaxAge == nil || latest.Sub(b.Status.CompletedAt.Time) < ret.MaxAge.Duration
		if inCount && inAge {
			keep[b.Name] = true
			oldestKept = b.Status.CompletedAt.Time
		}
	}
	for _, b := range done {
		if keep[b.Name] || (b.Status.Phase == v1alpha1.BackupFailed && !b.Status.CompletedAt.Time.Before(oldestKept)) {
			continue
		}
		s.delete(ctx, cluster, b, fmt.Sprintf("it falls outside the retention after %s succeeded", succeeded[0].Name))
	}
}

// delete deletes a backup the retention lets go (its files go through the
// runner's finalizer), with an Event saying why.
func (s *Scheduler) delete(ctx context.Context, cluster *v1alpha1.TalosCluster, b *v1alpha1.TalosBackup, why string) {
	if !b.DeletionTimestamp.IsZero() {
		return
	}
	err := s.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID})
	if client.IgnoreNotFound(err) != nil {
		// The next reconcile tries again; the backup stays meanwhile.
		ctrl.LoggerFrom(ctx).Error(err, "prune a backup", "backup", b.Name)
		return
	}
	if err == nil {
		b.DeletionTimestamp = &metav1.Time{Time: s.Clock.Now()} // not pruned twice in one pass
		events.Record(s.Recorder, cluster, b, v1alpha1.EventBackupPruned, "Prune", "deleted TalosBackup %s: %s", b.Name, why)
	}
}

// report sets the BackupSucceeded condition from the latest finished backup,
// and status.backup's latest success.
func (s *Scheduler) report(cluster *v1alpha1.TalosCluster, backups []v1alpha1.TalosBackup) {
	done := finished(backups)
	for _, b := range done {
		if b.Status.Phase == v1alpha1.BackupSucceeded {
			if cluster.Status.Backup == nil {
				cluster.Status.Backup = &v1alpha1.ClusterBackupStatus{}
			}
			cluster.Status.Backup.LastSuccessfulBackup = b.Name
			cluster.Status.Backup.LastSuccessfulTime = &metav1.Time{Time: b.Status.CompletedAt.Time}
			break
		}
	}
	if len(done) == 0 {
		if cluster.Spec.Backup == nil {
			meta.RemoveStatusCondition(&cluster.Status.Conditions, v1alpha1.ClusterConditionBackupSucceeded)
		} else if meta.FindStatusCondition(cluster.Status.Conditions, v1alpha1.ClusterConditionBackupSucceeded) == nil {
			meta.SetStatusCondition(&cluster.Status.Conditions, metav1.Condition{Type: v1alpha1.ClusterConditionBackupSucceeded,
				Status: metav1.ConditionUnknown, Reason: v1alpha1.BackupReasonNoBackupYet, Message: "no backup has finished yet"})
		}
		return
	}
	latest := done[0]
	c := metav1.Condition{Type: v1alpha1.ClusterConditionBackupSucceeded}
	if latest.Status.Phase == v1alpha1.BackupSucceeded {
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.BackupReasonWritten
		c.Message = fmt.Sprintf("TalosBackup %s succeeded at %s", latest.Name, latest.Status.CompletedAt.UTC().Format(time.RFC3339))
	} else {
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.BackupReasonTargetUnavailable
		c.Message = fmt.Sprintf("TalosBackup %s failed", latest.Name)
		if f := meta.FindStatusCondition(latest.Status.Conditions, v1alpha1.BackupConditionSucceeded); f != nil {
			c.Reason = f.Reason
			c.Message += ": " + f.Message
		}
	}
	meta.SetStatusCondition(&cluster.Status.Conditions, c)
}

// writeStatus applies status.backup and the BackupSucceeded condition
// under FieldManager when they changed; what the cluster no longer has is
// removed with them.
func (s *Scheduler) writeStatus(ctx context.Context, cluster *v1alpha1.TalosCluster, before *v1alpha1.TalosClusterStatus) error {
	if equality.Semantic.DeepEqual(before.Backup, cluster.Status.Backup) &&
		equality.Semantic.DeepEqual(meta.FindStatusCondition(before.Conditions, v1alpha1.ClusterConditionBackupSucceeded),
			meta.FindStatusCondition(cluster.Status.Conditions, v1alpha1.ClusterConditionBackupSucceeded)) {
		return nil
	}
	st := ichorac.TalosClusterStatus().WithConditions(statusapply.Conditions(cluster.Status.Conditions, v1alpha1.OwnedConditions(cluster, FieldManager)...)...)
	if b := cluster.Status.Backup; b != nil {
		ac := ichorac.ClusterBackupStatus()
		if b.LastScheduleTime != nil {
			ac.WithLastScheduleTime(*b.LastScheduleTime)
		}
		if b.LastSuccessfulBackup != "" {
			ac.WithLastSuccessfulBackup(b.LastSuccessfulBackup)
		}
		if b.LastSuccessfulTime != nil {
			ac.WithLastSuccessfulTime(*b.LastSuccessfulTime)
		}
		st.WithBackup(ac)
	}
	obj := ichorac.TalosCluster(cluster.Name, cluster.Namespace).WithStatus(st)
	if err := s.Client.Status().Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the status of TalosCluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return nil
}
