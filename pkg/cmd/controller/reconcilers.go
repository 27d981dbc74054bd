package controller

import (
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/controller/backup"
	"ichor.dev/ichor/pkg/controller/bootstraptoken"
	"ichor.dev/ichor/pkg/controller/clustersecrets"
	"ichor.dev/ichor/pkg/controller/configpatch"
	"ichor.dev/ichor/pkg/controller/credentialrequest"
	"ichor.dev/ichor/pkg/controller/discovery"
	"ichor.dev/ichor/pkg/controller/kubeletserving"
	"ichor.dev/ichor/pkg/controller/machineconfig"
	"ichor.dev/ichor/pkg/controller/operation"
	"ichor.dev/ichor/pkg/controller/reclaim"
	"ichor.dev/ichor/pkg/controller/taloscluster"
	"ichor.dev/ichor/pkg/controller/talosmachine"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// reconciler is what the manager runs: anything that registers itself.
type reconciler interface {
	SetupWithManager(ctrl.Manager) error
}

// shared is what the reconcilers are built from, beside the options.
type shared struct {
	mgr      ctrl.Manager
	scheme   *runtime.Scheme
	recorder events.EventRecorder
	dialer   talos.Dialer
	// kubes are the managed clusters' Kubernetes clients, kept between
	// reconciles of the cluster reconcilers that share them.
	kubes *workload.Clients
	// runner runs backups, and receives uploaded snapshots too.
	runner *backup.Runner
}

// reconcilers are every reconciler ichor-controller runs, one concern each.
func (o *Options) reconcilers(s shared) []reconciler {
	c, uncached := s.mgr.GetClient(), s.mgr.GetAPIReader()
	return []reconciler{
		// A cluster's secrets bundle: generated, or the one it names.
		&clustersecrets.Reconciler{Client: c, Secrets: uncached, Scheme: s.scheme, Recorder: s.recorder},
		// Intake: a machine's node in maintenance mode, pinned and described.
		&talosmachine.Reconciler{Client: c, Dialer: s.dialer, Recorder: s.recorder, Options: talosmachine.Options{
			ContactTimeout: o.MachineContactTimeout, RecheckInterval: o.MachineRecheckInterval, MaxConcurrentReconciles: o.MachineConcurrency,
		}},
		// An approved machine's config: installed, rolled out, followed to Ready; its node reset on deletion.
		&machineconfig.Reconciler{Client: c, APIReader: uncached, Secrets: uncached, Dialer: s.dialer, Recorder: s.recorder,
			Options: machineconfig.Options{
				InstallImage: o.InstallImage, HealthInterval: o.MachineHealthInterval, MaxConcurrentReconciles: o.MachineConcurrency,
			}},
		// A config patch's validity and the machines it applies to.
		&configpatch.Reconciler{Client: c, Secrets: uncached, InstallImage: o.InstallImage},
		// A cluster's bootstrap and health.
		&taloscluster.Reconciler{Client: c, Secrets: uncached, Dialer: s.dialer, Recorder: s.recorder, Kubes: s.kubes,
			Options: taloscluster.Options{InstallImage: o.InstallImage}},
		// A cluster's bootstrap token: it authenticates only while a kubelet needs it.
		&bootstraptoken.Reconciler{Client: c, Secrets: uncached, Recorder: s.recorder, Kubes: s.kubes},
		// Kubelet serving certificates: approved for the nodes they name.
		&kubeletserving.Reconciler{Client: c, Secrets: uncached, Dialer: s.dialer, Recorder: s.recorder,
			Options: kubeletserving.Options{PollInterval: o.KubeletServingPollInterval}},
		// TalosOperations: upgrades, reboots, resets, rotations, restores.
		&operation.Reconciler{Client: c, APIReader: uncached, Secrets: uncached, Dialer: s.dialer, Recorder: s.recorder,
			Options: operation.Options{
				PollInterval: o.OperationPollInterval, StepTimeout: o.OperationStepTimeout,
				InstallImage: o.InstallImage, ScratchDir: o.ScratchDir, BackupVolumeDir: o.BackupVolumeDir,
			}},
		// TalosBackups, and each cluster's backup schedule and retention.
		s.runner,
		&backup.Scheduler{Client: c, APIReader: uncached, Recorder: s.recorder, Clock: o.ScheduleClock},
		// MachineReclaims: a node reset and brought into another cluster.
		&reclaim.Reconciler{Client: c, Secrets: uncached, Dialer: s.dialer, Recorder: s.recorder,
			Options: reclaim.Options{PollInterval: o.OperationPollInterval, CallTimeout: o.MachineContactTimeout}},
		// TalosCredentialRequests: a short-lived Talos API client certificate for the least role, or a denial.
		&credentialrequest.Reconciler{Client: c, Secrets: uncached, Recorder: s.recorder,
			Options: credentialrequest.Options{Retention: o.CredentialRequestRetention}},
		// Provisioning-network scans: nodes in maintenance mode found and added.
		&discovery.Reconciler{Client: c, Dialer: s.dialer, Recorder: s.recorder, Options: discovery.Options{
			Namespace: o.DiscoveryNamespace, ProbesPerSecond: o.ScanProbesPerSecond, Parallelism: o.ScanParallelism,
			ContactTimeout: o.MachineContactTimeout,
		}},
	}
}
