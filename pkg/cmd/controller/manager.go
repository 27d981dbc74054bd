package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/clusterindex"
	"ichor.dev/ichor/pkg/controller/backup"
	"ichor.dev/ichor/pkg/controller/uploadserver"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// EventSource is the reporting controller of ichor-controller's Events.
const EventSource = v1alpha1.ReporterController

// readyzCacheTimeout bounds how long /readyz waits for the caches.
const readyzCacheTimeout = time.Second

// NewScheme knows the built-in kinds the controller touches and ichor.dev/v1alpha1.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewManager builds the controller manager with every reconciler
// (reconcilers.go), the upload endpoint and the health probes registered.
func (o *Options) NewManager(cfg *rest.Config) (ctrl.Manager, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	// ichor.dev/v1alpha1 has a protobuf encoding: the controller's clients and
	// caches speak it, as they do for built-in kinds.
	if err := apiutil.AddToProtobufScheme(v1alpha1.AddToScheme); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	mgr, err := ctrl.NewManager(cfg, o.managerOptions(scheme))
	if err != nil {
		return nil, fmt.Errorf("create controller manager: %w", err)
	}
	// Talos call latency on /metrics, beside controller-runtime's workqueue
	// depth and reconcile latency. A manager built again in the same
	// process (tests) finds it registered.
	if err := ctrlmetrics.Registry.Register(talos.CallDuration); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return nil, fmt.Errorf("register Talos call metrics: %w", err)
	}
	if err := clusterindex.Register(context.Background(), mgr); err != nil {
		return nil, err
	}

	s := shared{mgr: mgr, scheme: scheme, recorder: mgr.GetEventRecorder(EventSource), dialer: talos.Machinery{}, kubes: &workload.Clients{}}
	s.runner = &backup.Runner{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Secrets: mgr.GetAPIReader(), Dialer: s.dialer, Recorder: s.recorder,
		Options: backup.Options{VolumeDir: o.BackupVolumeDir},
	}
	for _, r := range o.reconcilers(s) {
		if err := r.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("set up %T: %w", r, err)
		}
	}
	if err := o.addUploadServer(mgr, cfg, s.runner); err != nil {
		return nil, err
	}
	if err := addProbes(mgr); err != nil {
		return nil, err
	}
	return mgr, nil
}

// managerOptions are the controller manager's: serving, leader election,
// and a cache without Secrets.
func (o *Options) managerOptions(scheme *runtime.Scheme) ctrl.Options {
	return ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       o.metricsServing(),
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		PprofBindAddress:              o.PprofBindAddress,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: &o.SkipControllerNameValidation},
		Client: client.Options{Cache: &client.CacheOptions{
			// Secrets are read one by one, never listed or watched: the
			// controller holds no RBAC for that, and caches no bundles.
			DisableFor: []client.Object{&corev1.Secret{}},
		}},
	}
}

// addUploadServer serves the endpoint ichor-apiserver streams uploaded
// snapshots to, into runner, when it has an address.
func (o *Options) addUploadServer(mgr ctrl.Manager, cfg *rest.Config, runner *backup.Runner) error {
	if o.UploadBindAddress == "" {
		return nil
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return mgr.Add(&uploadserver.Server{
		BindAddress: o.UploadBindAddress, CertFile: o.UploadCertFile, KeyFile: o.UploadKeyFile,
		Kube: kube, Receiver: runner, Caller: o.UploadCaller, IdleTimeout: o.UploadIdleTimeout,
	})
}

// addProbes serves /healthz, and /readyz once the informer caches synced.
func addProbes(mgr ctrl.Manager) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("informers", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), readyzCacheTimeout)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return fmt.Errorf("informer caches not synced")
		}
		return nil
	})
}

// Run runs the controller manager until ctx ends.
func (o *Options) Run(ctx context.Context, cfg *rest.Config) error {
	if err := o.waitForAPI(ctx, cfg); err != nil {
		return err
	}
	mgr, err := o.NewManager(cfg)
	if err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("Starting ichor-controller",
		"leaderElection", o.LeaderElect, "leaseNamespace", o.LeaderElectionNamespace, "leaseName", o.LeaderElectionID,
		"discoveryNamespace", o.DiscoveryNamespace)
	return mgr.Start(ctx)
}
