// Package machineconfig configures approved TalosMachines. It renders each
// machine's config from its cluster, itself and the TalosConfigPatches that
// target it, installs the first one over the maintenance API (only to a node
// presenting the pinned certificate), and from then on talks to the node
// with mutual TLS, as os:admin minted from the cluster's bundle, to roll out
// changes by their effect class and to follow the node to Ready.
//
// Rollout: a change that needs no reboot is applied at once, everywhere. A
// change that needs a reboot (or an API server restart on a control plane)
// holds the cluster's disruption budget (package disruption) and waits until
// every other approved machine of the cluster is Ready, so one node at a
// time goes away and control planes keep etcd's quorum. A worker takes a
// new machine.ca (a CA rotation's IssueNew) only once every control plane
// issues from it, as talosctl rotate-ca orders them. Every step
// is recorded in the machine's status before the next is taken, and each is
// decided from the node's own state, so a controller that restarts resumes
// where it stopped without repeating or skipping one.
package machineconfig

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/configstatus"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/disruption"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// ControllerName names the controller in logs, metrics and Events.
const ControllerName = "talosmachine-config"

// Options tune the reconciler; zero values take the defaults.
type Options struct {
	// CallTimeout bounds one session with a node. Default 30s.
	CallTimeout time.Duration
	// PollInterval is how often a machine on its way to Ready is looked at. Default 2s.
	PollInterval time.Duration
	// HealthInterval is how often a Ready machine is checked. Default 1m.
	HealthInterval time.Duration
	// RetryInterval is the wait after a failure. Default 15s.
	RetryInterval time.Duration
	// CredentialTTL is the lifetime of the os:admin certificate minted per session. Default 10m.
	CredentialTTL time.Duration
	// InstallImage is the installer image written into configs; empty leaves machinery's default.
	InstallImage string
	// MaxConcurrentReconciles is how many machines are worked on at once. Default 4.
	MaxConcurrentReconciles int
}

func (o Options) withDefaults() Options {
	defaults.Positive(&o.CallTimeout, 30*time.Second)
	defaults.Positive(&o.PollInterval, 2*time.Second)
	defaults.Positive(&o.HealthInterval, time.Minute)
	defaults.Positive(&o.RetryInterval, 15*time.Second)
	defaults.Positive(&o.CredentialTTL, 10*time.Minute)
	defaults.Positive(&o.MaxConcurrentReconciles, 4)
	return o
}

// Reconciler configures approved TalosMachines.
type Reconciler struct {
	// Client reads (cached) and writes Ichor objects.
	Client client.Client
	// APIReader reads machines without the cache, for rollout decisions.
	APIReader client.Reader
	// Secrets reads bundle Secrets without a cache.
	Secrets  client.Reader
	Dialer   talos.Dialer
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Workload opens a managed cluster's API at endpoint as the controller's
	// own identity there; nil signs a short-lived client certificate from
	// the bundle (package workload). Tests give a fake.
	Workload func(bundle *secrets.Bundle, endpoint string) (kubernetes.Interface, error)

	budget *disruption.Budget
	kubes  workload.Clients
}

// SetupWithManager registers the reconciler. It wakes on a machine's spec,
// approval, Kubernetes versions or deletion, on its cluster's spec (and kubelet verification
// latch), and on any patch of the cluster. It lists by clusterindex.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Now == nil {
		r.Now = time.Now
	}
	r.budget = &disruption.Budget{Client: r.Client, Reader: r.APIReader, Now: r.Now}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.TalosMachine{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, approvalChanged(), kubernetesVersionsChanged(), deletionStarted()))).
		Watches(&v1alpha1.TalosCluster{}, clusterindex.EnqueueMachines(r.Client),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, kubeletVerificationChanged(), disruptionReleased(), rotationMoved()))).
		Watches(&v1alpha1.TalosConfigPatch{}, clusterindex.EnqueueMachines(r.Client),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.MaxConcurrentReconciles}).
		Complete(r)
}

// approvalChanged passes updates that change a machine's approval decision.
func approvalChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.TalosMachine)
			n, ok2 := e.ObjectNew.(*v1alpha1.TalosMachine)
			return ok1 && ok2 && !equality.Semantic.DeepEqual(o.Status.Approval, n.Status.Approval)
		},
	}
}

// kubernetesVersionsChanged passes updates that change the versions a
// kubernetes-upgrade set for a machine's components: its config follows.
func kubernetesVersionsChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.TalosMachine)
			n, ok2 := e.ObjectNew.(*v1alpha1.TalosMachine)
			return ok1 && ok2 && !equality.Semantic.DeepEqual(o.Status.Kubernetes, n.Status.Kubernetes)
		},
	}
}

// kubeletVerificationChanged passes a cluster whose KubeletServingVerified
// latch changed: control planes render differently with it.
func kubeletVerificationChanged() predicate.Funcs {
	verified := func(o client.Object) bool {
		c, ok := o.(*v1alpha1.TalosCluster)
		return ok && meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ClusterConditionKubeletServingVerified)
	}
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool { return verified(e.ObjectOld) != verified(e.ObjectNew) },
	}
}

// rotationMoved passes a cluster whose status moved what its machines'
// configs render from: a Talos API CA rotation entered a phase, or the
// disk-encryption key slots changed.
func rotationMoved() predicate.Funcs {
	phase := func(o client.Object) v1alpha1.CARotationPhase {
		if c, ok := o.(*v1alpha1.TalosCluster); ok && c.Status.CARotation != nil {
			return c.Status.CARotation.Phase
		}
		return ""
	}
	slots := func(o client.Object) []int {
		if c, ok := o.(*v1alpha1.TalosCluster); ok {
			return render.DiskKeySlots(c)
		}
		return nil
	}
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return phase(e.ObjectOld) != phase(e.ObjectNew) || !slices.Equal(slots(e.ObjectOld), slots(e.ObjectNew))
		},
	}
}

// disruptionReleased passes a cluster whose disruption budget was given
// back: the machines waiting for it try again.
func disruptionReleased() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.TalosCluster)
			n, ok2 := e.ObjectNew.(*v1alpha1.TalosCluster)
			return ok1 && ok2 && o.Status.Disruption != nil && n.Status.Disruption == nil
		},
	}
}

// deletionStarted passes the update that marks a machine for deletion.
func deletionStarted() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}
}

// step is what one reconcile found and did, to be written into status.
type step struct {
	m *v1alpha1.TalosMachine
	// cluster is m's cluster, as the cache has it, and bundle its secrets.
	cluster *v1alpha1.TalosCluster
	bundle  *secrets.Bundle
	// kubernetesAccepted are the Kubernetes CAs accepted beside the
	// bundle's during a CA rotation, which its clients trust too.
	kubernetesAccepted [][]byte
	now                metav1.Time
	// persist writes m's status now if it changed. A rollout step calls it
	// before giving back its cluster's disruption budget, so the next
	// decision sees this one.
	persist func(context.Context) error
}

func (s step) set(condType string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&s.m.Status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: s.m.Generation, LastTransitionTime: s.now,
	})
}

// changed reports whether condType now has another status or reason than in before.
func changed(before *v1alpha1.TalosMachineStatus, after *v1alpha1.TalosMachineStatus, condType string) bool {
	b, a := meta.FindStatusCondition(before.Conditions, condType), meta.FindStatusCondition(after.Conditions, condType)
	return a != nil && (b == nil || b.Status != a.Status || b.Reason != a.Reason)
}

// Reconcile brings one approved machine one step closer to running its config.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var m v1alpha1.TalosMachine
	if err := r.Client.Get(ctx, req.NamespacedName, &m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !m.DeletionTimestamp.IsZero() {
		return r.finalize(log.IntoContext(ctx, log.FromContext(ctx).WithValues("address", m.Spec.Address)), &m)
	}
	if m.Status.Approval == nil ||
		m.Status.Approval.Decision != v1alpha1.ApprovalApproved || m.Status.Maintenance == nil {
		// Only approved machines with a pinned certificate are configured; a
		// rejected one is never sent anything.
		return ctrl.Result{}, nil
	}
	logger := log.FromContext(ctx).WithValues("cluster", m.Spec.ClusterName, "address", m.Spec.Address)
	ctx = log.IntoContext(ctx, logger)

	initial := m.Status.DeepCopy()
	written := initial
	persist := func(ctx context.Context) error {
		if equality.Semantic.DeepEqual(written, &m.Status) {
			return nil
		}
		m.Status.ObservedGeneration = m.Generation
		if err := configstatus.WriteStatus(ctx, r.Client, &m); err != nil {
			return err
		}
		written = m.Status.DeepCopy()
		return nil
	}
	s := step{m: &m, now: metav1.NewTime(r.Now()), persist: persist}
	result, err := r.reconcile(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := persist(ctx); err != nil {
		return ctrl.Result{}, err
	}
	if changed(initial, &m.Status, v1alpha1.MachineConditionReady) && meta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.MachineConditionReady) {
		events.Record(r.Recorder, &m, nil, v1alpha1.EventMachineReady, "CheckHealth",
			"Node %s runs its config and is ready", m.Status.NodeName)
	}
	return result, nil
}

// healthJitter is the share of HealthInterval a check is put off by at
// random, at most.
const healthJitter = 0.1

// healthCheckLater looks at a Ready machine again after HealthInterval
// (and up to a tenth more, at random), at low priority: routine checks of
// thousands of running machines never hold up a machine an event woke
// (one just approved, or changed), which the queue hands out first. The
// jitter spreads machines that became Ready together (a thousand approved
// at once) over the interval, rather than checking them together for ever.
func (r *Reconciler) healthCheckLater() ctrl.Result {
	return ctrl.Result{RequeueAfter: wait.Jitter(r.Options.HealthInterval, healthJitter), Priority: ptr.To(handler.LowPriority)}
}

// reconcile decides and takes the next step; the caller writes the status.
func (r *Reconciler) reconcile(ctx context.Context, s step) (ctrl.Result, error) {
	m := s.m
	retry := ctrl.Result{RequeueAfter: r.Options.RetryInterval}

	var cluster v1alpha1.TalosCluster
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName}, &cluster); err != nil {
		if apierrors.IsNotFound(err) {
			s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonClusterNotFound,
				fmt.Sprintf("TalosCluster %s does not exist in namespace %s", m.Spec.ClusterName, m.Namespace))
			return retry, nil
		}
		return ctrl.Result{}, err
	}
	if cluster.Spec.Paused || !cluster.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if !meta.IsStatusConditionTrue(cluster.Status.Conditions, v1alpha1.ClusterConditionSecretsReady) {
		s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonSecretsNotReady,
			"the cluster's secrets bundle is not ready; see its SecretsReady condition")
		return retry, nil
	}
	bundle, err := bundlestore.Load(ctx, r.Secrets, &cluster)
	if err != nil {
		s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonSecretsNotReady, err.Error())
		return retry, nil
	}
	var patches v1alpha1.TalosConfigPatchList
	if err := r.Client.List(ctx, &patches, clusterindex.InCluster(m.Namespace, cluster.Name)...); err != nil {
		return ctrl.Result{}, fmt.Errorf("list TalosConfigPatches of %s: %w", cluster.Name, err)
	}
	rendered, err := render.Render(render.Input{
		Cluster: &cluster, Machine: m, Patches: patches.Items, Secrets: bundle.Bundle, TalosAcceptedCAs: bundle.TalosAccepted, KubernetesAcceptedCAs: bundle.KubernetesAccepted,
		InstallImage: r.Options.InstallImage,
	})
	if err != nil {
		// Nothing is sent: a config that cannot be rendered whole is not applied in part.
		if prev := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied); prev == nil || prev.Message != err.Error() {
			events.Record(r.Recorder, m, nil, v1alpha1.EventConfigFailed, "RenderConfig", "%v", err)
		}
		s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonRenderFailed, err.Error())
		return ctrl.Result{}, nil // a change of the cluster, machine or a patch wakes us
	}

	callCtx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	creds, err := bundle.TalosCredentials(role.MakeSet(role.Admin), s.now.Time, r.Options.CredentialTTL)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.cluster, s.bundle, s.kubernetesAccepted = &cluster, bundle.Bundle, bundle.KubernetesAccepted
	if m.Status.AppliedConfig == nil {
		return r.install(callCtx, s, rendered, creds)
	}
	return r.converge(callCtx, s, rendered, creds)
}

// install sends the first config over the maintenance API, to the pinned certificate only.
func (r *Reconciler) install(ctx context.Context, s step, rendered render.Rendered, creds talos.Credentials) (ctrl.Result, error) {
	m := s.m
	retry := ctrl.Result{RequeueAfter: r.Options.RetryInterval}
	if err := r.ensureFinalizer(ctx, m); err != nil {
		return ctrl.Result{}, err
	}
	pin, err := talos.Pinned(m.Status.Maintenance.CertificateFingerprint)
	if err != nil {
		return ctrl.Result{}, err
	}
	node, err := r.Dialer.Maintenance(ctx, m.Spec.Address, pin)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() { _ = node.Close() }()

	// How the node booted, in its own word, decides whether it gets the
	// cluster's config, which holds the cluster's secrets.
	var res *talos.ApplyResult
	sec, err := node.Security(ctx)
	if err == nil {
		recordSecurity(&m.Status, sec)
		if why := secureBootRequired(s.cluster); why != "" && (sec == nil || !sec.SecureBoot) {
			msg := fmt.Sprintf("the node says it did not boot with SecureBoot, which %s; its config was not sent: "+
				"boot it from SecureBoot media with SecureBoot enforced by its firmware", why)
			if prev := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied); prev == nil || prev.Message != msg {
				events.Record(r.Recorder, m, nil, v1alpha1.EventSecureBootRequired, "InstallConfig", "%s", msg)
			}
			s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonSecureBootRequired, msg)
			return retry, nil
		}
		res, err = node.ApplyConfiguration(ctx, rendered.Config, talos.ApplyNoReboot)
	}
	if err != nil && r.installedAlready(ctx, m, creds) {
		// Installed by an earlier try whose status write was lost (a crash
		// between the call and the write): the node left maintenance mode
		// and presents its cluster's certificate now (its maintenance API
		// is gone: the pin does not match, or the handshake fails for want
		// of a client certificate). Record it; converge follows it.
		m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: rendered.Hash, Effect: v1alpha1.ConfigEffectReboot, AppliedAt: s.now}
		m.Status.Phase = v1alpha1.MachinePhaseConfiguring
		intake.RecordConfigured(&m.Status, m.Generation, m.Spec.Address, s.now)
		s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonInstalled,
			"the node runs a config of this cluster already (installed before its record was lost); it is followed over mutual TLS")
		s.set(v1alpha1.MachineConditionReady, metav1.ConditionFalse, v1alpha1.MachineReasonBooting, "the node runs its installed config")
		events.Record(r.Recorder, m, nil, v1alpha1.EventConfigApplied, "InstallConfig",
			"Found the node installed already (its record was lost); following it over mutual TLS")
		log.FromContext(ctx).Info("Found the node installed already; recorded the install")
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}
	if mismatch, ok := talos.AsFingerprintMismatch(err); ok {
		msg := intake.MismatchMessage(mismatch)
		if prev := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied); prev == nil || prev.Message != msg {
			events.Record(r.Recorder, m, nil, v1alpha1.EventCertificateMismatch, "InstallConfig", "%s; its config was not sent", mismatch.Error())
		}
		// CertificateVerified is intake's, which sees the mismatch too.
		s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonCertificateMismatch, msg)
		return retry, nil
	}
	if err != nil {
		return r.applyFailed(s, "InstallConfig", err), nil
	}
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: rendered.Hash, Effect: v1alpha1.ConfigEffectReboot, AppliedAt: s.now}
	m.Status.Phase = v1alpha1.MachinePhaseConfiguring
	s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonInstalled,
		fmt.Sprintf("config %s installed over the maintenance API of the node presenting the pinned certificate", short(rendered.Hash)))
	s.set(v1alpha1.MachineConditionReady, metav1.ConditionFalse, v1alpha1.MachineReasonBooting, "the node installs its config and boots into it")
	events.Record(r.Recorder, m, nil, v1alpha1.EventConfigApplied, "InstallConfig",
		"Installed config %s as %s over the maintenance API (pinned certificate); the node installs and boots: %s",
		short(rendered.Hash), render.MachineRole(m), res.Details)
	log.FromContext(ctx).Info("Installed config", "hash", rendered.Hash, "patches", len(rendered.Applied))
	return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
}

// installedAlready reports whether the node at m's address was configured
// already: it answers over mutual TLS with a certificate of the cluster's
// Talos CA (which only a config from this cluster's bundle gives it) and it
// is this machine (its system UUID), so it is not an impostor and not
// another node of the cluster behind a moved address.
func (r *Reconciler) installedAlready(ctx context.Context, m *v1alpha1.TalosMachine, creds talos.Credentials) bool {
	if m.Status.Hardware == nil || m.Status.Hardware.UUID == "" {
		// Without a UUID another node of the cluster cannot be told apart.
		return false
	}
	node, err := r.Dialer.Configured(ctx, m.Spec.Address, creds)
	if err == nil {
		defer func() { _ = node.Close() }()
		err = intake.CheckIdentity(ctx, node, m)
	}
	if err != nil {
		log.FromContext(ctx).V(1).Info("The node is not configured already", "reason", err.Error())
		return false
	}
	return true
}

// converge follows a configured node: to Ready when it runs the rendered
// config, or a rollout step when it does not.
func (r *Reconciler) converge(ctx context.Context, s step, rendered render.Rendered, creds talos.Credentials) (ctrl.Result, error) {
	m := s.m
	node, err := r.Dialer.Configured(ctx, m.Spec.Address, creds)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() { _ = node.Close() }()

	st, err := node.Status(ctx)
	if err != nil {
		return r.notRunning(s, v1alpha1.MachineReasonNotReachable, fmt.Sprintf("the node's Talos API does not answer over mutual TLS: %v", err)), nil
	}
	m.Status.NodeName = st.Nodename
	recordSecurity(&m.Status, st.Security)
	if !st.Running() {
		msg := "the node is in stage " + st.Stage
		if len(st.Unmet) > 0 {
			msg += fmt.Sprintf(", waiting for %v", st.Unmet)
		}
		reason := v1alpha1.MachineReasonBooting
		if st.Stage == stageShuttingDown {
			reason = v1alpha1.MachineReasonShuttingDown
		}
		return r.notRunning(s, reason, msg), nil
	}

	// What the node runs decides, not what status says was sent: after a
	// restart, or while a reboot is pending, the two differ.
	current, err := node.Config(ctx)
	if err != nil {
		return r.notRunning(s, v1alpha1.MachineReasonNotReachable, err.Error()), nil
	}
	effect, changes, err := render.Classify(current, rendered.Config)
	var reset *render.ResetRequiredError
	if errors.As(err, &reset) {
		// The node keeps what it runs, and runs: it is Ready, and gives
		// back the budget a change it took it for held. A node-reset
		// installs the new config.
		if prev := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied); prev == nil || prev.Message != err.Error() {
			events.Record(r.Recorder, m, nil, v1alpha1.EventConfigFailed, "CompareConfig", "%v", err)
		}
		m.Status.Phase = v1alpha1.MachinePhaseReady
		s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonResetRequired, err.Error())
		s.set(v1alpha1.MachineConditionReady, metav1.ConditionTrue, v1alpha1.MachineReasonRunning, fmt.Sprintf("node %s is running and ready, with the config it had", st.Nodename))
		if disruption.HeldBy(s.cluster, m) {
			if err := s.persist(ctx); err != nil {
				return ctrl.Result{}, err
			}
			if err := r.budget.Release(ctx, m); err != nil {
				return ctrl.Result{}, err
			}
		}
		return r.healthCheckLater(), nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("compare the config of %s/%s: %w", m.Namespace, m.Name, err)
	}
	if effect == v1alpha1.ConfigEffectNone {
		if m.Status.AppliedConfig.Hash != rendered.Hash {
			// The node runs it already: applied by this reconciler just now
			// (a cached copy of m may predate the write that recorded it,
			// effect included), or before a restart lost the record.
			var fresh v1alpha1.TalosMachine
			err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), &fresh)
			switch {
			case err == nil && fresh.Status.AppliedConfig != nil && fresh.Status.AppliedConfig.Hash == rendered.Hash:
				m.Status.AppliedConfig = fresh.Status.AppliedConfig
			case err != nil && !apierrors.IsNotFound(err):
				return ctrl.Result{}, fmt.Errorf("read TalosMachine %s/%s: %w", m.Namespace, m.Name, err)
			default:
				m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: rendered.Hash, Effect: v1alpha1.ConfigEffectNone, AppliedAt: s.now}
			}
		}
		s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate, fmt.Sprintf("the node runs config %s", short(rendered.Hash)))
		if restartsAPIServer(s.cluster, m) {
			// Back once its kube-apiserver serves the change: only then may
			// the next control plane restart its own.
			waiting, err := r.apiServerWaits(ctx, s, node, s.bundle)
			if err != nil {
				return ctrl.Result{}, err
			}
			if waiting != "" {
				m.Status.Phase = v1alpha1.MachinePhaseConfiguring
				s.set(v1alpha1.MachineConditionReady, metav1.ConditionFalse, v1alpha1.MachineReasonAPIServerRestarting, waiting)
				return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
			}
		}
		m.Status.Phase = v1alpha1.MachinePhaseReady
		s.set(v1alpha1.MachineConditionReady, metav1.ConditionTrue, v1alpha1.MachineReasonRunning, fmt.Sprintf("node %s is running and ready", st.Nodename))
		if disruption.HeldBy(s.cluster, m) {
			// Back: the next machine may go. Status first, so that the next
			// decision sees this machine Ready.
			if err := s.persist(ctx); err != nil {
				return ctrl.Result{}, err
			}
			if err := r.budget.Release(ctx, m); err != nil {
				return ctrl.Result{}, err
			}
		}
		return r.healthCheckLater(), nil
	}
	if m.Status.AppliedConfig.Hash == rendered.Hash && effect == v1alpha1.ConfigEffectReboot &&
		reasonOf(m.Status.Conditions, v1alpha1.MachineConditionReady) == v1alpha1.MachineReasonRebooting {
		// Sent with a reboot that has not happened yet.
		return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
	}

	role := render.MachineRole(m)
	if role == v1alpha1.MachineRoleWorker && changesTalosCA(changes) {
		waiting, err := r.controlPlanesIssueFrom(ctx, s, s.bundle.Certs.OS.Crt, creds)
		if err != nil {
			return ctrl.Result{}, err
		}
		if waiting != "" {
			s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonWaitingForRollout,
				"the change of machine.ca waits until every control plane issues from the new Talos API CA (a control plane's trustd signs this worker's API certificate): "+waiting)
			return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
		}
	}
	action, disrupts := disruptionOf(effect, role)
	if disrupts {
		if wait, err := r.takeBudget(ctx, s, effect, action); wait || err != nil {
			return ctrl.Result{RequeueAfter: r.Options.PollInterval}, err
		}
	}

	mode := talos.ApplyNoReboot
	if effect == v1alpha1.ConfigEffectReboot {
		mode = talos.ApplyReboot
	}
	if err := intake.CheckIdentity(ctx, node, m); err != nil {
		if disrupts {
			if err := r.budget.Release(ctx, m); err != nil {
				return ctrl.Result{}, err
			}
		}
		return r.applyFailed(s, "ApplyConfig", err), nil
	}
	res, err := node.ApplyConfiguration(ctx, rendered.Config, mode)
	if err != nil {
		if disrupts {
			if err := r.budget.Release(ctx, m); err != nil {
				return ctrl.Result{}, err
			}
		}
		return r.applyFailed(s, "ApplyConfig", err), nil
	}
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: rendered.Hash, Effect: effect, AppliedAt: s.now}
	what := describe(effect, changes)
	s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonApplied, fmt.Sprintf("config %s applied (%s)", short(rendered.Hash), what))
	if res.Rebooting {
		m.Status.Phase = v1alpha1.MachinePhaseConfiguring
		s.set(v1alpha1.MachineConditionReady, metav1.ConditionFalse, v1alpha1.MachineReasonRebooting, "the node reboots into its new config")
	}
	if err := s.persist(ctx); err != nil {
		// The node took the config; the next look at it records that.
		return ctrl.Result{}, err
	}
	events.Record(r.Recorder, m, nil, v1alpha1.EventConfigApplied, "ApplyConfig",
		"Applied config %s (%s) in mode %s: %s", short(rendered.Hash), what, mode, res.Details)
	log.FromContext(ctx).Info("Applied config", "hash", rendered.Hash, "effect", effect, "mode", mode.String(), "changes", len(changes))
	return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
}

// stageShuttingDown is Talos's machine stage while it shuts down.
const stageShuttingDown = "shutting down"

// notRunning records a configured node that is not (yet) running its config.
// Within the boot after an apply it is Configuring; a node not answering,
// or shutting down (it stays off until powered on), is Unreachable.
func (r *Reconciler) notRunning(s step, reason, msg string) ctrl.Result {
	m := s.m
	prev := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MachineConditionReady)
	booting := prev != nil && (prev.Reason == v1alpha1.MachineReasonBooting || prev.Reason == v1alpha1.MachineReasonRebooting)
	if booting && reason == v1alpha1.MachineReasonNotReachable {
		reason = prev.Reason // down while it boots is expected
	}
	s.set(v1alpha1.MachineConditionReady, metav1.ConditionFalse, reason, msg)
	if reason == v1alpha1.MachineReasonNotReachable || reason == v1alpha1.MachineReasonShuttingDown {
		m.Status.Phase = v1alpha1.MachinePhaseUnreachable
		return ctrl.Result{RequeueAfter: r.Options.RetryInterval}
	}
	m.Status.Phase = v1alpha1.MachinePhaseConfiguring
	return ctrl.Result{RequeueAfter: r.Options.PollInterval}
}

// applyFailed records a config the node refused or could not take.
func (r *Reconciler) applyFailed(s step, action string, err error) ctrl.Result {
	msg := err.Error()
	s.set(v1alpha1.MachineConditionConfigApplied, metav1.ConditionFalse, v1alpha1.MachineReasonApplyFailed, msg)
	events.Record(r.Recorder, s.m, nil, v1alpha1.EventConfigFailed, action, "The node did not take its config: %s", msg)
	return ctrl.Result{RequeueAfter: r.Options.RetryInterval}
}

// short is the first 12 characters of a config hash, as people read it.
func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// reasonOf is the reason of condition condType, or "".
func reasonOf(conds []metav1.Condition, condType string) string {
	if c := meta.FindStatusCondition(conds, condType); c != nil {
		return c.Reason
	}
	return ""
}
