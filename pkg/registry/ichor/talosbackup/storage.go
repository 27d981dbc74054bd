// Package talosbackup stores TalosBackups.
package talosbackup

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor"
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

	// A backup waits for the controller.
	PrepareForCreate: func(_ context.Context, b *ichor.TalosBackup) {
		b.Status = ichor.TalosBackupStatus{Phase: ichor.BackupPending}
	},

	// The controller holds a backup until its files are deleted from the target.
	Subresources: []resource.Subresource[*ichor.TalosBackup]{resource.Finalizers[*ichor.TalosBackup]()},

	Validate:             validation.ValidateTalosBackup,
	ValidateUpdate:       validation.ValidateTalosBackupUpdate,
	ValidateStatusUpdate: validation.ValidateTalosBackupStatusUpdate,

	SelectableFields: func(b *ichor.TalosBackup) fields.Set {
		return fields.Set{"spec.clusterName": b.Spec.ClusterName, "status.phase": string(b.Status.Phase)}
	},

	Columns: []metav1.TableColumnDefinition{
		{Name: "Cluster", Type: "string", Description: "TalosCluster backed up."},
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
		return []any{b.Spec.ClusterName, string(s.Phase), size, sum, s.Location, int64(len(s.Files))}
	},
}
