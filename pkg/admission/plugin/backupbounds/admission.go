// Package backupbounds bounds the TalosBackups people make by hand. A
// scheduled backup is pruned by its cluster's retention; one made by hand
// (an operator's "back up now", an admin's upload) is kept until an admin
// deletes it, and each one in flight holds some of ichor-controller's
// memory and writes to the backup target. So a cluster has at most
// MaxInFlight hand-made backups not yet ended, and at most MaxKept kept;
// past either, creating another is refused with what to do.
package backupbounds

import (
	"context"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
	listers "ichor.dev/ichor/pkg/generated/listers/ichor/v1alpha1"
)

// PluginName names the plugin in --enable-admission-plugins and friends.
const PluginName = "IchorBackupBounds"

// The bounds, per cluster.
const (
	MaxInFlight = 3
	MaxKept     = 50
)

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin bounds hand-made backups.
type Plugin struct {
	*admission.Handler
	backups listers.TalosBackupLister
}

var (
	_ admission.ValidationInterface   = &Plugin{}
	_ initializer.WantsIchorInformers = &Plugin{}
)

// New returns the plugin; it needs informers before use.
func New() *Plugin { return &Plugin{Handler: admission.NewHandler(admission.Create)} }

// SetIchorInformers receives the informers backups are counted from.
func (p *Plugin) SetIchorInformers(f externalversions.SharedInformerFactory) {
	p.backups = f.Ichor().V1alpha1().TalosBackups().Lister()
}

// ValidateInitialization refuses to run without informers.
func (p *Plugin) ValidateInitialization() error {
	if p.backups == nil {
		return errors.New(PluginName + " needs informers")
	}
	return nil
}

// Validate refuses a hand-made backup past its cluster's bounds. The
// informer may lag a new backup by milliseconds, so a burst can pass the
// bound by a few; the bound is on cost, not on safety.
func (p *Plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != ichor.Resource("talosbackups") || a.GetSubresource() != "" {
		return nil
	}
	b, ok := a.GetObject().(*ichor.TalosBackup)
	if !ok || b.Spec.ScheduledAt != nil {
		return nil
	}
	all, err := p.backups.TalosBackups(a.GetNamespace()).List(labels.Everything())
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("%s: %w", PluginName, err))
	}
	inFlight, kept := 0, 0
	for _, o := range all {
		if o.Spec.ClusterName != b.Spec.ClusterName || o.Spec.ScheduledAt != nil || !o.DeletionTimestamp.IsZero() {
			continue
		}
		kept++
		if o.Status.Phase != v1alpha1.BackupSucceeded && o.Status.Phase != v1alpha1.BackupFailed {
			inFlight++
		}
	}
	path := field.NewPath("spec", "clusterName")
	switch {
	case inFlight >= MaxInFlight:
		return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(), field.Forbidden(path,
			fmt.Sprintf("TalosCluster %s has %d backups made by hand that have not ended, the most it may: wait for one to end", b.Spec.ClusterName, inFlight)))
	case kept >= MaxKept:
		return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(), field.Forbidden(path,
			fmt.Sprintf("TalosCluster %s keeps %d backups made by hand, the most it may (retention prunes scheduled ones only): an admin deletes old ones first", b.Spec.ClusterName, kept)))
	}
	return nil
}
