// Package talosbackup stores TalosBackups.
package talosbackup

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/bytesize"
	"ichor.dev/ichor/pkg/registry/resource"
)

// Definition describes TalosBackups to the generic storage.
var Definition = &resource.Definition[*ichor.TalosBackup]{
	Resource:        ichor.Resource("talosbackups"),
	Singular:        "talosbackup",
	NamespaceScoped: true,
	ShortNames:      []string{"tb"},

	New:     func() *ichor.TalosBackup { return &ichor.TalosBackup{} },
	NewList: func() runtime.Object { return &ichor.TalosBackupList{} },

	// A backup waits for the controller, which alone adds the finalizer
	// that holds it until its files are deleted: a creator's finalizers
	// would hold it where nobody but admins could let it go.
	PrepareForCreate: func(_ context.Context, b *ichor.TalosBackup) {
		b.Status = ichor.TalosBackupStatus{Phase: ichor.BackupPending}
		b.Finalizers = nil
	},

	// finalizers: the controller holds a backup until its files are
	// deleted. schedule: the verb that marks a backup as the schedule's.
	Subresources: append([]resource.Subresource[*ichor.TalosBackup]{resource.Finalizers[*ichor.TalosBackup]()},
		resource.FieldSubresources[*ichor.TalosBackup]("talosbackups", v1alpha1.TalosBackup{}, validation.ValidateTalosBackupUpdate)...),

	Validate:             validation.ValidateTalosBackup,
	ValidateUpdate:       validation.ValidateTalosBackupUpdate,
	ValidateStatusUpdate: validation.ValidateTalosBackupStatusUpdate,

	SelectableFields: func(b *ichor.TalosBackup) fields.Set {
		return fields.Set{"spec.clusterName": b.Spec.ClusterName, "status.phase": string(b.Status.Phase)}
	},

	Columns: []metav1.TableColumnDefinition{
		{Name: "Cluster", Type: "string", Description: "TalosCluster backed up."},
		{Name: "Scheduled", Type: "string", Description: "The schedule's run time it stands for; empty for a backup created by hand."},
		{Name: "Phase", Type: "string", Description: "Pending, Running, Succeeded or Failed."},
		{Name: "Size", Type: "string", Description: "Bytes stored, compressed and encrypted, over every file."},
		{Name: "Snapshot Digest", Type: "string", Description: "SHA-256 of the etcd snapshot, before compression and encryption (its first 12 hex digits)."},
		{Name: "Location", Type: "string", Description: "Where the files are."},
		{Name: "Files", Type: "integer", Priority: 1, Description: "Files written: the etcd snapshot and a config per machine."},
	},
	Cells: func(b *ichor.TalosBackup) []any {
		s := &b.Status
		size, sum := "", ""
		if s.Phase == ichor.BackupSucceeded {
			size = bytesize.Format(s.StoredSize)
		}
		for _, f := range s.Files {
			if f.Content == ichor.BackupContentEtcdSnapshot && len(f.Digest) >= len("sha256:")+12 {
				sum = f.Digest[:len("sha256:")+12]
			}
		}
		scheduled := ""
		if b.Spec.ScheduledAt != nil {
			scheduled = b.Spec.ScheduledAt.UTC().Format("2006-01-02T15:04Z")
		}
		return []any{b.Spec.ClusterName, scheduled, string(s.Phase), size, sum, s.Location, int64(len(s.Files))}
	},
}
