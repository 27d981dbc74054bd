// Package discovery finds machines in maintenance mode on the provisioning
// networks named in the IchorInstallation's settings and creates a
// TalosMachine for each one it has not seen, already pinned to the
// certificate it presented. Scans are bounded (the API bounds each network,
// MaxAddresses bounds their sum) and paced (ProbesPerSecond, Parallelism).
package discovery

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/talos"
)

// ControllerName names the controller in logs, metrics and Events.
const ControllerName = "provisioning-network-scan"

const (
	discoveredLabel      = "ichor.dev/discovered"
	discoveredAnnotation = "ichor.dev/discovered-at"
)

// Options tune scanning; zero values take the defaults below.
type Options struct {
	// Namespace is where discovered TalosMachines are created; it must exist.
	Namespace string
	// Port is the Talos API port probed. Default 50000.
	Port string
	// ProbesPerSecond paces new connections. Default 50.
	ProbesPerSecond float64
	// Parallelism bounds connections in flight. Default 16.
	Parallelism int
	// ProbeTimeout bounds a TCP connection attempt. Default 1s.
	ProbeTimeout time.Duration
	// ContactTimeout bounds reading a found node's facts. Default 15s.
	ContactTimeout time.Duration
	// MaxAddresses bounds the addresses of one scan. Default 1<<18.
	MaxAddresses int
}

func (o Options) withDefaults() Options {
	if o.Port == "" {
		o.Port = v1alpha1.DefaultTalosAPIPort
	}
	defaults.Positive(&o.ProbesPerSecond, 50)
	defaults.Positive(&o.Parallelism, 16)
	defaults.Positive(&o.ProbeTimeout, time.Second)
	defaults.Positive(&o.ContactTimeout, 15*time.Second)
	defaults.Positive(&o.MaxAddresses, 1<<18)
	return o
}

// Reconciler scans the provisioning networks of the IchorInstallation.
type Reconciler struct {
	Client   client.Client
	Dialer   talos.Dialer
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// SetupWithManager registers the reconciler. A scan starts at start-up, when
// the installation's spec changes, and every scanInterval; the status it
// writes does not start one.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Options.Namespace == "" {
		return fmt.Errorf("%s: no namespace for discovered machines", ControllerName)
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.IchorInstallation{}, builder.WithPredicates(
			predicate.GenerationChangedPredicate{},
			predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == v1alpha1.InstallationName }),
		)).
		Complete(r)
}

// Reconcile scans once and schedules the next scan.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var inst v1alpha1.IchorInstallation
	if err := r.Client.Get(ctx, req.NamespacedName, &inst); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	interval := v1alpha1.DefaultScanInterval
	if d := inst.Spec.Settings.ScanInterval; d != nil && d.Duration > 0 {
		interval = d.Duration
	}
	networks, err := parseNetworks(inst.Spec.Settings.ProvisioningNetworks)
	if err != nil {
		// The API validates the networks, so this is a bug or a skew.
		return ctrl.Result{}, fmt.Errorf("IchorInstallation %s: %w", inst.Name, err)
	}
	if len(networks) == 0 {
		return ctrl.Result{}, r.writeCondition(ctx, &inst, nil)
	}

	known, err := r.knownAddresses(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	seq, total, truncated := addresses(networks, r.Options.MaxAddresses)
	started := r.Now()
	logger.Info("Scanning provisioning networks", "networks", inst.Spec.Settings.ProvisioningNetworks, "addresses", total)
	s := &scanner{
		dialer: r.Dialer, port: r.Options.Port, rate: rate.Limit(r.Options.ProbesPerSecond),
		parallelism: r.Options.Parallelism, probeTimeout: r.Options.ProbeTimeout, contactTimeout: r.Options.ContactTimeout,
	}
	found := s.scan(ctx, seq, func(address string) bool { return known[normalize(address)] })
	if ctx.Err() != nil {
		return ctrl.Result{}, ctx.Err()
	}

	created, failed := 0, 0
	for _, res := range found {
		ok, err := r.adopt(ctx, res)
		switch {
		case err != nil:
			failed++
			logger.Error(err, "Cannot create a TalosMachine for a discovered node", "address", res.Address)
		case ok:
			created++
		}
	}

	c := &metav1.Condition{
		Type: v1alpha1.InstallationConditionProvisioningNetworksScanned, Status: metav1.ConditionTrue, Reason: v1alpha1.InstallationReasonScanned,
		Message: fmt.Sprintf("scanned %d addresses in %v from %s: %d nodes in maintenance mode answered, %d new TalosMachines in namespace %s",
			total, r.Now().Sub(started).Round(time.Second), started.UTC().Format(time.RFC3339), len(found), created, r.Options.Namespace),
	}
	switch {
	case failed > 0:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.InstallationReasonCreateFailed
		c.Message += fmt.Sprintf("; %d could not be created, see the controller's log", failed)
	case truncated:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.InstallationReasonTruncated
		c.Message += fmt.Sprintf("; the networks hold more than %d addresses, the rest were not scanned", r.Options.MaxAddresses)
	}
	logger.Info("Scanned provisioning networks", "addresses", total, "answered", len(found), "created", created, "failed", failed)
	if err := r.writeCondition(ctx, &inst, c); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: interval}, nil
}

// adopt creates the TalosMachine of a discovered node, pinned to the
// certificate the scan saw. created is false when the machine exists.
func (r *Reconciler) adopt(ctx context.Context, res intake.Result) (created bool, err error) {
	now := metav1.NewTime(r.Now())
	m := &v1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   r.Options.Namespace,
			Name:        machineName(res.Facts.UUID, res.Fingerprint),
			Labels:      map[string]string{discoveredLabel: "true"},
			Annotations: map[string]string{discoveredAnnotation: now.UTC().Format(time.RFC3339)},
		},
		Spec: v1alpha1.TalosMachineSpec{Address: res.Address},
	}
	if err := r.Client.Create(ctx, m); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("create TalosMachine %s/%s: %w", m.Namespace, m.Name, err)
		}
		return false, r.seenElsewhere(ctx, m.Name, res)
	}
	events.Record(r.Recorder, m, nil, v1alpha1.EventDiscovered, "ScanProvisioningNetworks",
		"Found in maintenance mode at %s with SPKI fingerprint %s", res.Address, res.Fingerprint)

	// The scan's contact is the first contact: record it, unless the
	// machine's own reconciler has been faster.
	intake.Record(&m.Status, m.Generation, res, now)
	if err := r.Client.Status().Update(ctx, m); err != nil && !apierrors.IsConflict(err) {
		return true, fmt.Errorf("record first contact in TalosMachine %s/%s: %w", m.Namespace, m.Name, err)
	}
	return true, nil
}

// seenElsewhere tells the owners of an existing machine that a node with
// its identity answered at an address it does not have.
func (r *Reconciler) seenElsewhere(ctx context.Context, name string, res intake.Result) error {
	var existing v1alpha1.TalosMachine
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.Options.Namespace, Name: name}, &existing); err != nil {
		return client.IgnoreNotFound(err)
	}
	if normalize(existing.Spec.Address) != normalize(res.Address) {
		events.Record(r.Recorder, &existing, nil, v1alpha1.EventSeenElsewhere, "ScanProvisioningNetworks",
			"A node with this machine's identity answered in maintenance mode at %s (SPKI fingerprint %s); spec.address is %s",
			res.Address, res.Fingerprint, existing.Spec.Address)
	}
	return nil
}

// knownAddresses are the addresses of every TalosMachine, and of every
// node a MachineReclaim is resetting or taking in (between the old machine
// and the new one, its node is in maintenance mode at an address no machine
// has), normalized.
func (r *Reconciler) knownAddresses(ctx context.Context) (map[string]bool, error) {
	var list v1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list TalosMachines: %w", err)
	}
	var reclaims v1alpha1.MachineReclaimList
	if err := r.Client.List(ctx, &reclaims); err != nil {
		return nil, fmt.Errorf("list MachineReclaims: %w", err)
	}
	known := make(map[string]bool, len(list.Items))
	for _, m := range list.Items {
		known[normalize(m.Spec.Address)] = true
	}
	for _, rc := range reclaims.Items {
		if p := rc.Status.Phase; rc.Status.Address != "" && (p == v1alpha1.ReclaimResetting || p == v1alpha1.ReclaimJoining) {
			known[normalize(rc.Status.Address)] = true
		}
	}
	return known, nil
}

// writeCondition sets (or, when c is nil, removes) the scan condition on
// the latest installation: a scan can take minutes, so the object read
// before it may be stale.
func (r *Reconciler) writeCondition(ctx context.Context, inst *v1alpha1.IchorInstallation, c *metav1.Condition) error {
	key := client.ObjectKeyFromObject(inst)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var latest v1alpha1.IchorInstallation
		if err := r.Client.Get(ctx, key, &latest); err != nil {
			return err
		}
		before := latest.Status.DeepCopy()
		if c == nil {
			meta.RemoveStatusCondition(&latest.Status.Conditions, v1alpha1.InstallationConditionProvisioningNetworksScanned)
		} else {
			c.ObservedGeneration = inst.Generation
			meta.SetStatusCondition(&latest.Status.Conditions, *c)
		}
		if equality.Semantic.DeepEqual(before, &latest.Status) {
			return nil
		}
		return r.Client.Status().Update(ctx, &latest)
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update status of IchorInstallation %s: %w", inst.Name, err)
	}
	return nil
}

func parseNetworks(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("provisioning network %q: %w", c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// normalize writes host:port addresses with IPs in one canonical form, so
// 10.5.0.2:50000 and [::ffff:10.5.0.2]:50000 are one address.
func normalize(address string) string {
	if ap, err := netip.ParseAddrPort(address); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return address
}
