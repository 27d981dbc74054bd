// Package controller is ichor-controller's command line: its options, and
// how they become a running controller manager (Validate, then Run).
package controller

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"ichor.dev/ichor/pkg/controller/credentialrequest"
)

// Defaults that match artifacts/controller-rbac.yaml and controller-deployment.yaml.
const (
	DefaultNamespace        = "ichor-system"
	DefaultLeaderElectionID = "ichor-controller"
)

// Options are everything ichor-controller can be told on its command line.
type Options struct {
	// MetricsBindAddress serves Prometheus metrics over HTTPS, to callers
	// kube-apiserver authenticates (a bearer token, through a TokenReview)
	// and authorizes to get the non-resource URL /metrics; "0" turns them
	// off.
	MetricsBindAddress string
	// MetricsCertFile and MetricsKeyFile are the metrics endpoint's serving
	// certificate, reloaded when it changes (in one directory); without
	// them the endpoint serves a self-signed certificate it makes at start.
	MetricsCertFile, MetricsKeyFile string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" turns them off.
	HealthProbeBindAddress string
	// PprofBindAddress serves Go's /debug/pprof, unauthenticated over plain
	// HTTP, so only on a loopback address; "0" (the default) turns it off.
	PprofBindAddress string

	// LeaderElect makes replicas elect one active manager.
	LeaderElect             bool
	LeaderElectionID        string
	LeaderElectionNamespace string

	// DiscoveryNamespace is where machines found on provisioning networks
	// are created.
	DiscoveryNamespace string
	// ScanProbesPerSecond and ScanParallelism pace provisioning-network scans.
	ScanProbesPerSecond float64
	ScanParallelism     int

	// MachineContactTimeout bounds one contact with a node.
	MachineContactTimeout time.Duration
	// MachineRecheckInterval is how often a machine awaiting approval is
	// checked for still presenting its pinned certificate.
	MachineRecheckInterval time.Duration
	// MachineHealthInterval is how often a Ready machine's node is checked.
	MachineHealthInterval time.Duration
	// MachineConcurrency is how many machines are contacted at once, by
	// intake and by configuration each. A reconcile mostly waits on a node
	// and on the API server, so with four, 1,000 machines approved at once
	// waited in the queue for most of their time (10,000 machines, 2 cores).
	MachineConcurrency int
	// KubeAPIQPS and KubeAPIBurst limit the manager's requests to the
	// management cluster's API (and Ichor's through it). The default is
	// sized for 10,000 machines: each health check reads its cluster's
	// bundle Secret (Secrets are not cached), about 170 reads a second at
	// one check a minute, and taking 1,000 machines in writes about four
	// requests each. kube-apiserver's priority and fairness, not this
	// limit, is what protects the management cluster.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// KubeletServingPollInterval is how often a cluster with kubelet serving
	// requests pending, or machines without a certificate, is looked at
	// again; new requests wake the approver through a watch regardless.
	KubeletServingPollInterval time.Duration
	// CredentialRequestRetention is how long an answered
	// TalosCredentialRequest is kept for its requester to read.
	CredentialRequestRetention time.Duration
	// SkipControllerNameValidation lets a process build more than one
	// manager over its life, as the integration tests do; controller-runtime
	// otherwise refuses a controller name it has seen. Not a flag.
	SkipControllerNameValidation bool
	// InstallImage is the Talos installer image written into machine
	// configs (machine.install.image), e.g. siderolabs/installer:v1.13.0
	// behind the registry mirror the site uses.
	InstallImage string
	// OperationPollInterval is how often a running TalosOperation's step in
	// flight, or a started one that waits, is looked at.
	OperationPollInterval time.Duration
	// OperationStepTimeout is how long a node may take to come back from an
	// operation's reboot before its step fails.
	OperationStepTimeout time.Duration
	// BackupVolumeDir is the directory volume backup targets are paths
	// under (a mounted PersistentVolume); empty refuses volume targets.
	BackupVolumeDir string
	// ScheduleClock tells when a cluster's scheduled backup is due; nil is
	// the wall clock. Not a flag: tests move a fake one rather than wait for
	// the minute. Credentials, leases and step timeouts always read the wall
	// clock, since they bound what real peers see.
	ScheduleClock clock.WithDelayedExecution
	// ScratchDir holds an etcd-restore's decrypted, verified snapshot while
	// the restore runs: give it room for the largest snapshot.
	ScratchDir string

	// UploadBindAddress serves the endpoint ichor-apiserver streams
	// uploaded etcd snapshots to; empty turns it off (uploads are refused).
	UploadBindAddress string
	// UploadCertFile and UploadKeyFile are that endpoint's serving
	// certificate (ichor-apiserver's --controller-ca-file issues it).
	UploadCertFile, UploadKeyFile string
	// UploadCaller is the one user the upload endpoint takes uploads from.
	UploadCaller string
	// UploadIdleTimeout ends an upload whose uploader sends nothing for
	// that long.
	UploadIdleTimeout time.Duration

	// Log configures the structured (zap) logger; klog, which client-go
	// logs through, writes to it as well.
	Log zap.Options
}

// NewOptions returns options with ichor-controller's defaults.
func NewOptions() *Options {
	return &Options{
		MetricsBindAddress:         ":8443",
		HealthProbeBindAddress:     ":8081",
		PprofBindAddress:           "0",
		LeaderElect:                true,
		LeaderElectionID:           DefaultLeaderElectionID,
		LeaderElectionNamespace:    DefaultNamespace,
		DiscoveryNamespace:         DefaultNamespace,
		ScanProbesPerSecond:        50,
		ScanParallelism:            16,
		MachineContactTimeout:      20 * time.Second,
		MachineRecheckInterval:     time.Minute,
		MachineConcurrency:         16,
		MachineHealthInterval:      time.Minute,
		KubeletServingPollInterval: 3 * time.Second,
		CredentialRequestRetention: credentialrequest.DefaultRetention,
		OperationPollInterval:      2 * time.Second,
		OperationStepTimeout:       15 * time.Minute,
		KubeAPIQPS:                 300,
		KubeAPIBurst:               600,
		UploadCaller:               "system:serviceaccount:" + DefaultNamespace + ":ichor-apiserver",
		UploadIdleTimeout:          2 * time.Minute,
	}
}

// AddFlags registers the options' flags, and the --kubeconfig flag of
// controller-runtime's standard configuration loading (--kubeconfig, then
// $KUBECONFIG, then the in-cluster ServiceAccount, then ~/.kube/config).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	if f := flag.CommandLine.Lookup(config.KubeconfigFlagName); f != nil {
		fs.AddGoFlag(f)
	}
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress,
		`Address the Prometheus metrics endpoint (HTTPS; callers need get on the non-resource URL /metrics) binds to; "0" turns it off.`)
	fs.StringVar(&o.MetricsCertFile, "metrics-tls-cert-file", o.MetricsCertFile,
		"Serving certificate of the metrics endpoint, reloaded when it changes; empty: a self-signed one made at start.")
	fs.StringVar(&o.MetricsKeyFile, "metrics-tls-private-key-file", o.MetricsKeyFile,
		"Private key of the metrics endpoint's serving certificate, in the certificate's directory.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress,
		`Address /healthz and /readyz bind to; "0" turns them off.`)
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", o.PprofBindAddress,
		`Loopback address (e.g. 127.0.0.1:6060) Go's /debug/pprof profiles bind to, unauthenticated, for kubectl port-forward or a shell in the pod; "0" turns them off.`)
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect,
		"Elect one active manager among replicas through a Lease.")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID,
		"Name of the leader-election Lease.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace,
		"Namespace of the leader-election Lease.")
	fs.StringVar(&o.DiscoveryNamespace, "discovery-namespace", o.DiscoveryNamespace,
		"Namespace TalosMachines found on provisioning networks are created in; the controller must be allowed to create TalosMachines there.")
	fs.Float64Var(&o.ScanProbesPerSecond, "scan-probes-per-second", o.ScanProbesPerSecond,
		"New connections per second while scanning provisioning networks.")
	fs.IntVar(&o.ScanParallelism, "scan-parallelism", o.ScanParallelism,
		"Connections in flight while scanning provisioning networks.")
	fs.DurationVar(&o.MachineContactTimeout, "machine-contact-timeout", o.MachineContactTimeout,
		"Time limit of one contact with a node's Talos API.")
	fs.DurationVar(&o.KubeletServingPollInterval, "kubelet-serving-poll-interval", o.KubeletServingPollInterval,
		"How often a cluster waiting for kubelet serving certificates is looked at again; new requests are seen at once through a watch.")
	fs.DurationVar(&o.CredentialRequestRetention, "credential-request-retention", o.CredentialRequestRetention,
		"How long an answered TalosCredentialRequest is kept for its requester to read before it is deleted.")
	fs.DurationVar(&o.MachineHealthInterval, "machine-health-interval", o.MachineHealthInterval,
		"How often the node of a Ready machine is checked over its Talos API (each check up to a tenth later, at random, so machines Ready together are not checked together).")
	fs.DurationVar(&o.MachineRecheckInterval, "machine-recheck-interval", o.MachineRecheckInterval,
		"How often a machine awaiting approval is checked for still presenting its pinned certificate.")
	fs.StringVar(&o.InstallImage, "install-image", o.InstallImage,
		"Talos installer image written into machine configs (machine.install.image); empty leaves Talos's default")
	fs.DurationVar(&o.OperationPollInterval, "operation-poll-interval", o.OperationPollInterval,
		"How often a running TalosOperation's step in flight, or a started operation that waits, is looked at.")
	fs.DurationVar(&o.OperationStepTimeout, "operation-step-timeout", o.OperationStepTimeout,
		"How long a node may take to come back from an operation's reboot before its step fails and the operation stops.")
	fs.StringVar(&o.BackupVolumeDir, "backup-volume-dir", o.BackupVolumeDir,
		"Directory where a volume is mounted for TalosClusters whose spec.backup.target.volume names a path below it; empty refuses volume targets.")
	fs.StringVar(&o.ScratchDir, "scratch-dir", o.ScratchDir,
		"Directory where an etcd-restore keeps its decrypted, verified snapshot until it ends; room for the largest snapshot. Empty: the system's temporary directory.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS,
		"Requests per second the controller makes to the management cluster's API, sustained.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst,
		"Requests the controller may make to the management cluster's API in a burst.")
	fs.IntVar(&o.MachineConcurrency, "machine-concurrency", o.MachineConcurrency,
		"How many machines are contacted at once.")
	fs.StringVar(&o.UploadBindAddress, "upload-bind-address", o.UploadBindAddress,
		"Address of the HTTPS endpoint ichor-apiserver streams uploaded etcd snapshots to (talosbackups/NAME/upload); empty turns it off.")
	fs.StringVar(&o.UploadCertFile, "upload-tls-cert-file", o.UploadCertFile,
		"Serving certificate of the upload endpoint, reloaded when it changes.")
	fs.StringVar(&o.UploadKeyFile, "upload-tls-private-key-file", o.UploadKeyFile,
		"Private key of the upload endpoint's serving certificate.")
	fs.DurationVar(&o.UploadIdleTimeout, "upload-idle-timeout", o.UploadIdleTimeout,
		"An upload whose uploader sends nothing for this long ends as interrupted.")
	fs.StringVar(&o.UploadCaller, "upload-caller", o.UploadCaller,
		"The one user (ichor-apiserver's ServiceAccount) the upload endpoint takes uploads from; RBAC's create on talosbackups/receive is asked as well.")
	zfs := flag.NewFlagSet("zap", flag.ContinueOnError)
	o.Log.BindFlags(zfs)
	fs.AddGoFlagSet(zfs)
}

// Validate reports every invalid option at once.
func (o *Options) Validate() error {
	var errs []error
	if o.LeaderElect {
		if o.LeaderElectionID == "" || o.LeaderElectionNamespace == "" {
			errs = append(errs, errors.New("--leader-elect needs --leader-election-id and --leader-election-namespace"))
		}
		for _, msg := range validation.IsDNS1123Subdomain(o.LeaderElectionID) {
			errs = append(errs, fmt.Errorf("--leader-election-id %q: %s", o.LeaderElectionID, msg))
		}
	}
	for _, msg := range validation.IsDNS1123Label(o.DiscoveryNamespace) {
		errs = append(errs, fmt.Errorf("--discovery-namespace %q: %s", o.DiscoveryNamespace, msg))
	}
	if o.ScanProbesPerSecond <= 0 {
		errs = append(errs, fmt.Errorf("--scan-probes-per-second must be positive, not %v", o.ScanProbesPerSecond))
	}
	for _, c := range []struct {
		flag string
		ok   bool
	}{
		{"--scan-parallelism", o.ScanParallelism > 0},
		{"--machine-concurrency", o.MachineConcurrency > 0},
		{"--kube-api-qps", o.KubeAPIQPS > 0},
		{"--kube-api-burst", o.KubeAPIBurst > 0},
		{"--machine-health-interval", o.MachineHealthInterval > 0},
		{"--kubelet-serving-poll-interval", o.KubeletServingPollInterval > 0},
		{"--credential-request-retention", o.CredentialRequestRetention > 0},
		{"--machine-contact-timeout", o.MachineContactTimeout > 0},
		{"--machine-recheck-interval", o.MachineRecheckInterval > 0},
		{"--upload-idle-timeout", o.UploadIdleTimeout > 0},
	} {
		if !c.ok {
			errs = append(errs, fmt.Errorf("%s must be positive", c.flag))
		}
	}
	if err := loopbackOnly(o.PprofBindAddress); err != nil {
		errs = append(errs, fmt.Errorf("--pprof-bind-address: %w", err))
	}
	if (o.MetricsCertFile == "") != (o.MetricsKeyFile == "") {
		errs = append(errs, errors.New("--metrics-tls-cert-file and --metrics-tls-private-key-file go together"))
	} else if o.MetricsCertFile != "" && filepath.Dir(o.MetricsCertFile) != filepath.Dir(o.MetricsKeyFile) {
		errs = append(errs, errors.New("--metrics-tls-cert-file and --metrics-tls-private-key-file must be in one directory"))
	}
	if o.UploadBindAddress != "" && (o.UploadCertFile == "" || o.UploadKeyFile == "" || o.UploadCaller == "") {
		errs = append(errs, errors.New("--upload-bind-address needs --upload-tls-cert-file, --upload-tls-private-key-file and --upload-caller"))
	}
	return utilerrors.NewAggregate(errs)
}

// loopbackOnly accepts "0" (off) or a host:port whose host is a loopback IP.
func loopbackOnly(addr string) error {
	if addr == "0" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q: the profiles are served without authentication, so only on a loopback IP address", addr)
	}
	return nil
}
