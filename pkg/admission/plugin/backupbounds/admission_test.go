package backupbounds

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
)

// TestHandMadeBackupsAreBounded: an operator who backs up now, again and
// again, is refused past MaxInFlight backups that have not ended and past
// MaxKept kept, per cluster; scheduled backups and other clusters' do not
// count, and the schedule is never refused.
func TestHandMadeBackupsAreBounded(t *testing.T) {
	backup := func(name, cluster string, phase v1alpha1.BackupPhase, scheduled bool) *v1alpha1.TalosBackup {
		b := &v1alpha1.TalosBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
			Spec: v1alpha1.TalosBackupSpec{ClusterName: cluster}, Status: v1alpha1.TalosBackupStatus{Phase: phase}}
		if scheduled {
			b.Spec.ScheduledAt = &metav1.Time{}
		}
		return b
	}
	check := func(existing []*v1alpha1.TalosBackup, scheduled bool) error {
		f := externalversions.NewSharedInformerFactory(fake.NewSimpleClientset(), 0)
		p := New()
		p.SetIchorInformers(f)
		for _, b := range existing {
			if err := f.Ichor().V1alpha1().TalosBackups().Informer().GetIndexer().Add(b); err != nil {
				t.Fatal(err)
			}
		}
		obj := &ichor.TalosBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "now"}, Spec: ichor.TalosBackupSpec{ClusterName: "prod"}}
		if scheduled {
			obj.Spec.ScheduledAt = &metav1.Time{}
		}
		return p.Validate(context.Background(), admission.NewAttributesRecord(obj, nil, ichor.Kind("TalosBackup").WithVersion("v1alpha1"), "team-a", "now",
			ichor.Resource("talosbackups").WithVersion("v1alpha1"), "", admission.Create, nil, false, &user.DefaultInfo{Name: "olivia"}), nil)
	}
	var running, ended []*v1alpha1.TalosBackup
	for i := range MaxInFlight {
		running = append(running, backup(fmt.Sprintf("r%d", i), "prod", v1alpha1.BackupRunning, false))
	}
	for i := range MaxKept {
		ended = append(ended, backup(fmt.Sprintf("e%d", i), "prod", v1alpha1.BackupSucceeded, false))
	}
	others := []*v1alpha1.TalosBackup{backup("o1", "other", v1alpha1.BackupRunning, false), backup("s1", "prod", v1alpha1.BackupRunning, true)}
	for _, c := range []struct {
		name      string
		existing  []*v1alpha1.TalosBackup
		scheduled bool
		refused   string
	}{
		{"the first", nil, false, ""},
		{"beside other clusters' and scheduled ones", append(others, running[:MaxInFlight-1]...), false, ""},
		{"past the ones in flight", running, false, "have not ended"},
		{"past the ones kept", ended, false, "an admin deletes old ones"},
		{"the schedule, whatever runs", append(running, ended...), true, ""},
	} {
		err := check(c.existing, c.scheduled)
		if (c.refused == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.refused) {
			t.Errorf("%s: %v, want refused %q", c.name, err, c.refused)
		}
	}
}
