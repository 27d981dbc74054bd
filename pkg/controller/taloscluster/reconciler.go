// Package taloscluster follows each TalosCluster as a whole: it counts its
// machines, bootstraps etcd on the first control plane exactly once, follows
// etcd membership, reaches the cluster's Kubernetes API with
// ichor-controller's own least-privilege identity (installing that identity's
// role on first contact), and sums it up in conditions, phase and Events.
package taloscluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/version"

	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/defaults"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/kubeupgrade"
	"ichor.dev/ichor/pkg/predicates"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// ControllerName names the controller in logs, metrics and Events.
const ControllerName = "taloscluster-health"

// Options tune the reconciler; zero values take the defaults.
type Options struct {
	// PollInterval is how often a cluster that is not Ready is looked at. Default 5s.
	PollInterval time.Duration
	// HealthInterval is how often a Ready cluster is checked. Default 1m.
	HealthInterval time.Duration
	// CallTimeout bounds the calls of one reconcile. Default 30s.
	CallTimeout time.Duration
	// CredentialTTL is the lifetime of the certificates minted per reconcile. Default 10m.
	CredentialTTL time.Duration
}

func (o Options) withDefaults() Options {
	defaults.Positive(&o.PollInterval, 5*time.Second)
	defaults.Positive(&o.HealthInterval, time.Minute)
	defaults.Positive(&o.CallTimeout, 30*time.Second)
	defaults.Positive(&o.CredentialTTL, 10*time.Minute)
	return o
}

// Reconciler follows TalosClusters.
type Reconciler struct {
	Client   client.Client
	Secrets  client.Reader
	Dialer   talos.Dialer
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	// kubes are the clusters' Kubernetes clients, kept between reconciles.
	kubes workload.Clients
}

// SetupWithManager registers the reconciler: it wakes on a cluster's spec
// and on any change of a machine of the cluster.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.TalosCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.TalosMachine{}, clusterindex.EnqueueCluster(), builder.WithPredicates(predicates.NotOnlyServingCertificateRecorded)).
		Complete(r)
}

// view is what one reconcile learned, and the status it writes.
type view struct {
	cluster  *v1alpha1.TalosCluster
	machines []v1alpha1.TalosMachine // approved, of this cluster, sorted by name
	now      metav1.Time
}

func (v *view) set(condType string, status metav1.ConditionStatus, reason, format string, args ...any) {
	meta.SetStatusCondition(&v.cluster.Status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...),
		ObservedGeneration: v.cluster.Generation, LastTransitionTime: v.now,
	})
}

func (v *view) controlPlanes() []v1alpha1.TalosMachine {
	var cps []v1alpha1.TalosMachine
	for _, m := range v.machines {
		if render.MachineRole(&m) == v1alpha1.MachineRoleControlPlane {
			cps = append(cps, m)
		}
	}
	return cps
}

// Reconcile looks at one cluster and records what it found.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cluster v1alpha1.TalosCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() || cluster.Spec.Paused {
		return ctrl.Result{}, nil
	}
	var list v1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list, clusterindex.InCluster(cluster.Namespace, cluster.Name)...); err != nil {
		return ctrl.Result{}, fmt.Errorf("list machines of TalosCluster %s: %w", req, err)
	}
	before := cluster.Status.DeepCopy()
	v := &view{cluster: &cluster, now: metav1.NewTime(r.Now())}
	cluster.Status.Machines = v1alpha1.MachineCounts{}
	for _, m := range list.Items {
		// Rejected machines are not the cluster's, and deleted ones are leaving it.
		if a := m.Status.Approval; (a != nil && a.Decision == v1alpha1.ApprovalRejected) || !m.DeletionTimestamp.IsZero() {
			continue
		}
		cluster.Status.Machines.Total++
		if !clusterindex.Member(&m) {
			continue
		}
		v.machines = append(v.machines, m)
		if render.MachineRole(&m) == v1alpha1.MachineRoleControlPlane {
			cluster.Status.Machines.ControlPlanes++
		} else {
			cluster.Status.Machines.Workers++
		}
		if m.Status.Phase == v1alpha1.MachinePhaseReady {
			cluster.Status.Machines.Ready++
		}
	}
	slices.SortFunc(v.machines, func(a, b v1alpha1.TalosMachine) int { return cmp.Compare(a.Name, b.Name) })

	ctx, cancel := context.WithTimeout(ctx, r.Options.CallTimeout)
	defer cancel()
	r.observe(ctx, v)

	r.summarize(v)
	if cluster.Status.ObservedGeneration != cluster.Generation || !equality.Semantic.DeepEqual(before, &cluster.Status) {
		cluster.Status.ObservedGeneration = cluster.Generation
		if err := WriteStatus(ctx, r.Client, &cluster); err != nil {
			return ctrl.Result{}, err
		}
		r.announce(before, &cluster)
	}
	if cluster.Status.Phase == v1alpha1.ClusterPhaseReady {
		return ctrl.Result{RequeueAfter: r.Options.HealthInterval}, nil
	}
	return ctrl.Result{RequeueAfter: r.Options.PollInterval}, nil
}

// observe bootstraps when it is time and checks etcd and the Kubernetes API.
func (r *Reconciler) observe(ctx context.Context, v *view) {
	cluster := v.cluster
	if !meta.IsStatusConditionTrue(cluster.Status.Conditions, v1alpha1.ClusterConditionSecretsReady) {
		v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionFalse, v1alpha1.ClusterReasonSecretsNotReady, "the secrets bundle is not ready")
		return
	}
	bundle, err := bundlestore.Load(ctx, r.Secrets, cluster)
	if err != nil {
		v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionFalse, v1alpha1.ClusterReasonSecretsNotReady, "%v", err)
		return
	}
	// Public: the certificate kubeconfigs of the cluster trust.
	cluster.Status.KubernetesCA = string(bundle.KubernetesCA())
	creds, err := bundle.TalosCredentials(role.MakeSet(role.Admin), v.now.Time, r.Options.CredentialTTL)
	if err != nil {
		v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionFalse, v1alpha1.ClusterReasonSecretsNotReady, "%v", err)
		return
	}
	if cluster.Status.BootstrappedAt == nil && !r.bootstrap(ctx, v, creds) {
		return
	}
	r.checkEtcd(ctx, v, creds)
	r.checkKubernetes(ctx, v, bundle)
}

// session is a running control plane of the cluster.
type session struct {
	machine *v1alpha1.TalosMachine
	node    talos.Node
}

// runningControlPlanes opens sessions with the configured control planes
// that run; it also reports the ones that do not. Callers close the sessions.
func (r *Reconciler) runningControlPlanes(ctx context.Context, v *view, creds talos.Credentials) (running []session, down []string) {
	for _, m := range v.controlPlanes() {
		if m.Status.AppliedConfig == nil {
			down = append(down, m.Name+" (not configured)")
			continue
		}
		node, err := r.Dialer.Configured(ctx, m.Spec.Address, creds)
		if err != nil {
			down = append(down, m.Name)
			continue
		}
		if st, err := node.Status(ctx); err != nil || st.Stage != "running" {
			_ = node.Close()
			down = append(down, m.Name+" (not running)")
			continue
		}
		running = append(running, session{machine: &m, node: node})
	}
	return running, down
}

func closeAll(sessions []session) {
	for _, s := range sessions {
		_ = s.node.Close()
	}
}

// bootstrap starts etcd on the first control plane, once. It first asks
// every configured control plane for etcd members: one that has some means
// etcd was bootstrapped already (perhaps before a restart lost the record),
// and it bootstraps only when every configured control plane runs and none
// has, so it never starts a second etcd cluster. It reports whether the
// cluster is bootstrapped.
func (r *Reconciler) bootstrap(ctx context.Context, v *view, creds talos.Credentials) bool {
	cluster := v.cluster
	if len(v.controlPlanes()) == 0 {
		v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionFalse, v1alpha1.ClusterReasonNoControlPlane, "no approved control plane yet")
		return false
	}
	running, down := r.runningControlPlanes(ctx, v, creds)
	defer closeAll(running)
	for _, s := range running {
		if members, err := s.node.EtcdMembers(ctx); err == nil && len(members) > 0 {
			r.recordBootstrap(v, s.machine, "found etcd running")
			return true
		}
	}
	// An admin may let the bootstrap go ahead with the control planes that
	// run (talosclusters/override); the bootstrap uses up the override.
	override := cluster.Status.Override
	if override != nil && override.Check != v1alpha1.CheckBootstrapWaitsForControlPlanes {
		override = nil
	}
	if len(running) == 0 || (len(down) > 0 && override == nil) {
		v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionFalse, v1alpha1.ClusterReasonWaitingForControlPlane,
			"waiting for every configured control plane to run before bootstrapping etcd: %s; an admin may bootstrap with the running ones through the override subresource (check %s)",
			strings.Join(down, ", "), v1alpha1.CheckBootstrapWaitsForControlPlanes)
		return false
	}
	first := running[0]
	err := first.node.Bootstrap(ctx)
	switch {
	case err == nil || err == talos.ErrAlreadyBootstrapped:
		r.recordBootstrap(v, first.machine, "bootstrapped etcd")
		events.Record(r.Recorder, cluster, nil, v1alpha1.EventBootstrapped, "Bootstrap",
			"Bootstrapped etcd on control plane %s (%s)", first.machine.Name, first.machine.Spec.Address)
		if len(down) > 0 {
			if err := useOverride(ctx, r.Client, cluster, override); err != nil {
				log.FromContext(ctx).Error(err, "The override stays granted")
			}
			events.Record(r.Recorder, cluster, nil, v1alpha1.EventOverrideUsed, "Bootstrap",
				"Bootstrapped etcd without waiting for %s, past the %s check, as %s allowed: %s",
				strings.Join(down, ", "), override.Check, override.By, override.Reason)
		}
		log.FromContext(ctx).Info("Bootstrapped etcd", "machine", first.machine.Name)
		return true
	default:
		v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionFalse, v1alpha1.ClusterReasonBootstrapFailed, "bootstrap on %s failed: %v", first.machine.Name, err)
		events.Record(r.Recorder, cluster, nil, v1alpha1.EventBootstrapFailed, "Bootstrap",
			"Bootstrap on control plane %s failed: %v", first.machine.Name, err)
		return false
	}
}

func (r *Reconciler) recordBootstrap(v *view, m *v1alpha1.TalosMachine, what string) {
	at := v.now
	v.cluster.Status.BootstrappedAt = &at
	v.set(v1alpha1.ClusterConditionBootstrapped, metav1.ConditionTrue, v1alpha1.ClusterReasonBootstrapped, "%s on control plane %s", what, m.Name)
}

// checkEtcd compares etcd's voting members with the control planes.
func (r *Reconciler) checkEtcd(ctx context.Context, v *view, creds talos.Credentials) {
	running, _ := r.runningControlPlanes(ctx, v, creds)
	defer closeAll(running)
	if len(running) == 0 {
		v.set(v1alpha1.ClusterConditionEtcdHealthy, metav1.ConditionFalse, v1alpha1.ClusterReasonEtcdUnreadable, "no control plane answers")
		return
	}
	members, err := running[0].node.EtcdMembers(ctx)
	if err != nil {
		v.set(v1alpha1.ClusterConditionEtcdHealthy, metav1.ConditionFalse, v1alpha1.ClusterReasonEtcdUnreadable, "list etcd members on %s: %v", running[0].machine.Name, err)
		return
	}
	voting := map[string]bool{}
	for _, mb := range members {
		if !mb.Learner {
			voting[mb.Hostname] = true
		}
	}
	var missing []string
	for _, m := range v.controlPlanes() {
		if m.Status.NodeName == "" || !voting[m.Status.NodeName] {
			missing = append(missing, m.Name)
		}
	}
	if len(missing) > 0 {
		v.set(v1alpha1.ClusterConditionEtcdHealthy, metav1.ConditionFalse, v1alpha1.ClusterReasonMembersMissing,
			"%d voting members; not yet members: %s", len(voting), strings.Join(missing, ", "))
		return
	}
	v.set(v1alpha1.ClusterConditionEtcdHealthy, metav1.ConditionTrue, v1alpha1.ClusterReasonMembersHealthy, "%d voting members, one per control plane", len(voting))
}

// checkKubernetes reaches the cluster's Kubernetes API as ichor-controller's
// own identity; when that identity is not authorized yet, it installs its
// role with a short-lived cluster-admin certificate and tries again.
func (r *Reconciler) checkKubernetes(ctx context.Context, v *view, bundle *secretsbundle.Secrets) {
	endpoint := v.cluster.Spec.ControlPlane.Endpoint
	// One client per cluster, kept between reconciles: a new one each time
	// was a certificate signed and a TLS connection made per reconcile.
	cs, err := r.kubes.Get(v.cluster.UID, endpoint, bundle.Bundle, v.now.Time, r.Options.CredentialTTL, bundle.KubernetesAccepted...)
	if err != nil {
		v.set(v1alpha1.ClusterConditionKubernetesAPIReachable, metav1.ConditionFalse, v1alpha1.ClusterReasonUnreachable, "%v", err)
		return
	}
	var sv version.Info
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err == nil {
		err = json.Unmarshal(raw, &sv)
	}
	if err != nil {
		v.set(v1alpha1.ClusterConditionKubernetesAPIReachable, metav1.ConditionFalse, v1alpha1.ClusterReasonUnreachable, "read the version at %s: %v", endpoint, err)
		return
	}
	v.cluster.Status.KubernetesVersion = sv.GitVersion
	var nodes *corev1.NodeList
	err = r.withAccess(ctx, v, bundle, func() (err error) {
		nodes, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err
	})
	if errors.Is(err, errAccessInstall) {
		v.set(v1alpha1.ClusterConditionKubernetesAPIReachable, metav1.ConditionFalse, v1alpha1.ClusterReasonAccessInstallFailed, "%v", err)
		return
	}
	if err != nil {
		v.set(v1alpha1.ClusterConditionKubernetesAPIReachable, metav1.ConditionFalse, v1alpha1.ClusterReasonUnreachable, "list nodes at %s: %v", endpoint, err)
		return
	}
	v.set(v1alpha1.ClusterConditionKubernetesAPIReachable, metav1.ConditionTrue, v1alpha1.ClusterReasonReachable, "%s answers, Kubernetes %s", endpoint, sv.GitVersion)
	// The version the cluster runs is its lowest component's, as talosctl
	// upgrade-k8s reads it; the answering API server's when none tells.
	pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app"})
	if err == nil {
		if lowest := kubeupgrade.LowestRunning(pods.Items, nodes.Items); lowest != "" {
			v.cluster.Status.KubernetesVersion = lowest
		}
	}
	r.restrictBootstrapToken(ctx, v, cs, bundle, nodes.Items)

	readyNodes := map[string]bool{}
	for i := range nodes.Items {
		readyNodes[nodes.Items[i].Name] = workload.NodeReady(&nodes.Items[i])
	}
	var waiting []string
	for _, m := range v.machines {
		if m.Status.NodeName == "" || !readyNodes[m.Status.NodeName] {
			waiting = append(waiting, m.Name)
		}
	}
	if len(waiting) > 0 {
		v.set(v1alpha1.ClusterConditionNodesReady, metav1.ConditionFalse, v1alpha1.ClusterReasonNodesNotReady,
			"%d of %d machines have a Ready Node; waiting for %s", len(v.machines)-len(waiting), len(v.machines), strings.Join(waiting, ", "))
		return
	}
	v.set(v1alpha1.ClusterConditionNodesReady, metav1.ConditionTrue, v1alpha1.ClusterReasonNodesReady, "every machine's Node is Ready")
}

// errAccessInstall wraps a failure to install the controller's access.
var errAccessInstall = errors.New("install ichor-controller's access")

// withAccess calls f, and when the controller's identity is not authorized
// for it (a new cluster, or roles from an older Ichor), installs its access
// with a short-lived cluster-admin certificate and calls f again.
func (r *Reconciler) withAccess(ctx context.Context, v *view, bundle *secretsbundle.Secrets, f func() error) error {
	err := f()
	if !apierrors.IsForbidden(err) {
		return err
	}
	if err := workload.InstallControllerAccess(ctx, bundle.Bundle, v.cluster.Spec.ControlPlane.Endpoint, v.now.Time, bundle.KubernetesAccepted...); err != nil {
		return fmt.Errorf("%w: %w", errAccessInstall, err)
	}
	events.Record(r.Recorder, v.cluster, nil, v1alpha1.EventControllerAccess, "InstallControllerAccess",
		"Bound the roles %s to %s in the cluster's Kubernetes", workload.ControllerRole, workload.Controller.User)
	return f()
}

// restrictBootstrapToken lets the cluster's bootstrap token authenticate
// only while one of its machines is joining (see joining). Outside those
// windows a worker config's token gets nobody a kubelet certificate.
func (r *Reconciler) restrictBootstrapToken(ctx context.Context, v *view, cs kubernetes.Interface, bundle *secretsbundle.Secrets, nodes []corev1.Node) {
	joining := joiningMachines(v.machines, nodes)
	rebootstrap := kubeletsRebootstrap(v.cluster)
	enable := len(joining) > 0 || rebootstrap
	var changed bool
	err := r.withAccess(ctx, v, bundle, func() (err error) {
		changed, err = workload.SetBootstrapToken(ctx, cs, bundle.Bundle, enable)
		return err
	})
	switch {
	case errors.Is(err, workload.ErrTokenSecretMissing):
		v.set(v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionUnknown, v1alpha1.ClusterReasonTokenSecretMissing,
			"%v: a control plane creates it when it boots; until then no kubelet can join", err)
		return
	case err != nil:
		v.set(v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionUnknown, v1alpha1.ClusterReasonTokenUpdateFailed, "set the bootstrap token's usage: %v", err)
		return
	case len(joining) > 0:
		v.set(v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionTrue, v1alpha1.ClusterReasonMachinesJoining,
			"the bootstrap token authenticates while %s join", strings.Join(joining, ", "))
	case rebootstrap:
		v.set(v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionTrue, v1alpha1.ClusterReasonKubeletsRebootstrapping,
			"the bootstrap token authenticates while the kubelets bootstrap client certificates from the new Kubernetes CA (TalosOperation %s)",
			v.cluster.Status.CARotation.Operation)
	default:
		v.set(v1alpha1.ClusterConditionBootstrapTokenEnabled, metav1.ConditionFalse, v1alpha1.ClusterReasonAllMachinesJoined,
			"every machine has a Node; the bootstrap token authenticates nobody")
	}
	if !changed {
		return
	}
	if enable && len(joining) == 0 {
		events.Record(r.Recorder, v.cluster, nil, v1alpha1.EventBootstrapTokenEnabled, "SetBootstrapToken",
			"The bootstrap token authenticates while the kubelets bootstrap client certificates from the new Kubernetes CA")
		return
	}
	if enable {
		events.Record(r.Recorder, v.cluster, nil, v1alpha1.EventBootstrapTokenEnabled, "SetBootstrapToken",
			"The bootstrap token authenticates while %s join", strings.Join(joining, ", "))
		return
	}
	events.Record(r.Recorder, v.cluster, nil, v1alpha1.EventBootstrapTokenDisabled, "SetBootstrapToken",
		"Every machine has a Node and no kubelet bootstraps: the bootstrap token no longer authenticates")
}

// kubeletsRebootstrap reports whether cluster is in a Kubernetes CA
// rotation's last two phases: a kubelet whose client certificate no CA in
// force verifies (from the phase that drops the old CA on) bootstraps a new
// one with the bootstrap token, as Talos has it do; the token is enabled
// from the phase before, so that none waits for it.
func kubeletsRebootstrap(cluster *v1alpha1.TalosCluster) bool {
	r := cluster.Status.CARotation
	return r != nil && r.Kubernetes && r.Phase != v1alpha1.CARotationAcceptNew
}

// joiningMachines are the machines whose kubelet may need the bootstrap
// token: from approval until their Node registers. A Node older than the
// machine is a previous machine's under the same name (its kubelet's
// certificate went with a reset): while it is not Ready, the new kubelet
// may still be bootstrapping. So is the kubelet of a machine whose node a
// node-reset wiped and Ichor pinned again after its Node last reported:
// its certificate went with the wipe, and its Node may still read Ready.
func joiningMachines(machines []v1alpha1.TalosMachine, nodes []corev1.Node) []string {
	byName := map[string]*corev1.Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	var joining []string
	for _, m := range machines {
		n := byName[m.Status.NodeName]
		switch {
		case m.Status.NodeName == "" || n == nil:
			joining = append(joining, m.Name)
		case n.CreationTimestamp.Before(&m.CreationTimestamp) && !workload.NodeReady(n):
			joining = append(joining, m.Name)
		case m.Status.Maintenance != nil && !workload.ReportedSince(n, m.Status.Maintenance.SeenAt.Time):
			joining = append(joining, m.Name)
		}
	}
	return joining
}

// summarize sets MachinesReady, Ready, the phase and the observed Talos version.
func (r *Reconciler) summarize(v *view) {
	s := &v.cluster.Status
	var notReady []string
	versions := map[string]bool{}
	for _, m := range v.machines {
		if m.Status.Phase != v1alpha1.MachinePhaseReady {
			notReady = append(notReady, fmt.Sprintf("%s (%s)", m.Name, cmp.Or(string(m.Status.Phase), "new")))
		}
		if m.Status.TalosVersion != "" {
			versions[m.Status.TalosVersion] = true
		}
	}
	if len(versions) == 1 {
		for ver := range versions {
			s.TalosVersion = ver
		}
	}
	switch {
	case s.Machines.ControlPlanes == 0:
		v.set(v1alpha1.ClusterConditionMachinesReady, metav1.ConditionFalse, v1alpha1.ClusterReasonNoControlPlane, "no approved control plane")
	case len(notReady) > 0:
		v.set(v1alpha1.ClusterConditionMachinesReady, metav1.ConditionFalse, v1alpha1.ClusterReasonMachinesNotReady,
			"%d of %d machines Ready; waiting for %s", s.Machines.Ready, len(v.machines), strings.Join(notReady, ", "))
	default:
		v.set(v1alpha1.ClusterConditionMachinesReady, metav1.ConditionTrue, v1alpha1.ClusterReasonAllReady,
			"%d control planes and %d workers Ready", s.Machines.ControlPlanes, s.Machines.Workers)
	}

	var pending []string
	for _, t := range []string{v1alpha1.ClusterConditionSecretsReady, v1alpha1.ClusterConditionMachinesReady, v1alpha1.ClusterConditionBootstrapped,
		v1alpha1.ClusterConditionEtcdHealthy, v1alpha1.ClusterConditionKubernetesAPIReachable, v1alpha1.ClusterConditionNodesReady} {
		if !meta.IsStatusConditionTrue(s.Conditions, t) {
			pending = append(pending, t)
		}
	}
	wasReady := s.Phase == v1alpha1.ClusterPhaseReady || s.Phase == v1alpha1.ClusterPhaseDegraded
	switch {
	case len(pending) == 0:
		v.set(v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady, "the cluster is bootstrapped; its machines, Kubernetes API and Nodes are ready")
		s.Phase = v1alpha1.ClusterPhaseReady
	default:
		v.set(v1alpha1.ClusterConditionReady, metav1.ConditionFalse, v1alpha1.ClusterReasonNotReady, "not yet: %s", strings.Join(pending, ", "))
		switch {
		case wasReady:
			s.Phase = v1alpha1.ClusterPhaseDegraded
		case len(v.machines) == 0:
			s.Phase = v1alpha1.ClusterPhasePending
		default:
			s.Phase = v1alpha1.ClusterPhaseProvisioning
		}
	}
}

// announce emits the Events of a cluster turning Ready or losing it.
func (r *Reconciler) announce(before *v1alpha1.TalosClusterStatus, cluster *v1alpha1.TalosCluster) {
	if before.Phase == cluster.Status.Phase {
		return
	}
	switch cluster.Status.Phase {
	case v1alpha1.ClusterPhaseReady:
		events.Record(r.Recorder, cluster, nil, v1alpha1.EventClusterReady, "CheckHealth",
			"Cluster is Ready: %d control planes, %d workers", cluster.Status.Machines.ControlPlanes, cluster.Status.Machines.Workers)
	case v1alpha1.ClusterPhaseDegraded:
		events.Record(r.Recorder, cluster, nil, v1alpha1.EventClusterDegraded, "CheckHealth",
			"Cluster is no longer Ready: %s", meta.FindStatusCondition(cluster.Status.Conditions, v1alpha1.ClusterConditionReady).Message)
	}
}
