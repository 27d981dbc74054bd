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
//
// One reconcile, in a file per concern: install.go sends the first config,
// converge.go follows a configured node to Ready (the periodic health check
// is that same look: a node found off its config is converged again),
// rollout.go takes a change one disruption at a time, and finalize.go
// resets the node of a deleted machine. They stay one controller because
// they act on one node and write one share of its status
// (pkg/configstatus): controller-runtime never reconciles a machine twice
// at once, so a reset never runs beside an apply to the same node.
package machineconfig

import (
	"context"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/configstatus"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/disruption"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/installation"
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
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, kubeletVerificationChanged(), disruptionReleased(), rotationMoved(), imageChanged()))).
		Watches(&v1alpha1.TalosConfigPatch{}, clusterindex.EnqueueMachines(r.Client),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.MaxConcurrentReconciles}).
		Complete(r)
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
	settings, err := installation.Settings(ctx, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	rendered, err := render.Render(render.Input{
		Cluster: &cluster, Machine: m, Patches: patches.Items, Secrets: bundle.Bundle, TalosAcceptedCAs: bundle.TalosAccepted, KubernetesAcceptedCAs: bundle.KubernetesAccepted,
		ServiceAccountAcceptedKeys: bundle.ServiceAccountAccepted, EncryptionKeys: bundle.EncryptionKeys,
		InstallImage: r.Options.InstallImage, ImageFactory: settings.ImageFactory,
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
