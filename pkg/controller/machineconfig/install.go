package machineconfig

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/intake"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

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
		m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: rendered.Hash, Effect: v1alpha1.ConfigEffectReboot, AppliedAt: s.now, Contract: rendered.Contract}
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
	m.Status.AppliedConfig = &v1alpha1.AppliedConfigStatus{Hash: rendered.Hash, Effect: v1alpha1.ConfigEffectReboot, AppliedAt: s.now, Contract: rendered.Contract}
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
