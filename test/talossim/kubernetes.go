package talossim

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/crypto/x509"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/siderolabs/talos/pkg/machinery/config"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"

	"ichor.dev/ichor/test/internal/proc"
)

// kubeStartTimeout bounds each control-plane process's start.
const kubeStartTimeout = 90 * time.Second

// Kubernetes runs the real Kubernetes control planes of simulated clusters: for each bootstrapped
// cluster an etcd, a kube-apiserver, a kube-controller-manager (CSR signing, approval of kubelet
// client certificates, CSR cleaning, DaemonSets) and a kube-scheduler run as processes from the
// control-plane binaries, the way Talos brings up its static pods after Bootstrap, and the bootstrap
// manifests are applied (manifests.go). Give one Kubernetes to every node in Options.Kubernetes
// (it serves any number of clusters, one per endpoint); each configured node then also runs a
// simulated kubelet against its cluster's endpoint (kubelet.go).
//
// Everything comes from the bootstrapped node's machine config, as on a real control plane: the
// kube-apiserver listens at cluster.controlPlane.endpoint (which must be a loopback IP:port), serves a
// certificate issued by cluster.ca and trusts it for clients, signs service-account tokens with
// cluster.serviceAccount, authenticates the aggregation layer with cluster.aggregatorCA, keeps its data
// in an etcd whose certificates come from cluster.etcd.ca, and accepts cluster.token as the kubelets'
// bootstrap token. The controller manager signs node certificates with cluster.ca. Bootstrapping a
// cluster with other CAs at the same endpoint (it was reset and created anew) replaces the control
// plane there, data included.
//
// The binaries are those of hack/build-controlplane.sh whatever Kubernetes version the config names,
// and the simulated etcd membership (EtcdCluster) is separate from this real etcd, which only stores
// Kubernetes's data.
type Kubernetes struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and kube-scheduler.
	BinDir string
	// Dir holds certificates, data and logs; when empty a temporary directory that Stop removes.
	Dir string
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)

	mu      sync.Mutex
	runs    map[string]*kubeRun // by endpoint URL
	started int
	changed chan struct{}                 // closed and replaced when runs change
	power   map[string]*controlPlanePower // by endpoint URL (kubernetes_power.go)
	stopped bool
	tmpDir  string
}

// kubeRun is one start of a control plane, for one cluster CA at one endpoint.
type kubeRun struct {
	ca     string        // the cluster CA certificate it was started for
	ready  chan struct{} // closed once started or failed
	err    error         // why it failed; set before ready is closed
	admin  *rest.Config
	cancel context.CancelFunc
	done   chan struct{} // closed once its processes are stopped

	procs []*proc.Process // started so far, oldest first
	dir   string          // its certificates, data and logs

	// etcdURL and etcdTLS reach its etcd as kube-apiserver does; set before ready is closed.
	etcdURL string
	etcdTLS transport.TLSInfo
	// recoverFrom, when set, is the snapshot its etcd data directory is restored from before etcd starts.
	recoverFrom   string
	skipHashCheck bool

	// kube-apiserver (kubernetes_apiserver.go): its flags before the config's, its place in procs, and
	// how to tell that it serves; set before ready is closed and then used by the run's goroutine only.
	apiBase    []string
	apiIndex   int
	apiHealthy func(context.Context, *proc.Process) error
	// apiSpec is the key of the spec it runs; apiWant the spec it is to restart with; both under
	// Kubernetes.mu. apiKick wakes the run's goroutine.
	apiSpec string
	apiWant *apiServerSpec
	// cas are the Kubernetes CAs its certificates come from and trust (apiServerSpec.cas), under
	// Kubernetes.mu.
	cas     string
	apiKick chan struct{}
	// components are the controller manager and the scheduler: restarted when the cluster's CAs
	// change, as Talos replaces their static pods (kubernetes_apiserver.go).
	components []component
}

// component is a control-plane component other than kube-apiserver: its place in procs, its
// arguments and how to tell that it serves.
type component struct {
	name    string
	index   int
	args    []string
	healthy func(context.Context, *proc.Process) error
}

func newKubeRun(ca string, cancel context.CancelFunc, dir string) *kubeRun {
	return &kubeRun{
		ca: ca, ready: make(chan struct{}), cancel: cancel, done: make(chan struct{}), dir: dir,
		apiKick: make(chan struct{}, 1),
	}
}

// ErrKubernetesStopped is returned by waits on a stopped Kubernetes.
var ErrKubernetesStopped = errors.New("talossim: kubernetes control plane stopped")

// bootstrap starts the control plane for cfg in the background unless one already runs for cfg's
// cluster CA at its endpoint; a control plane of another CA there is replaced.
func (k *Kubernetes) bootstrap(cfg config.Provider) {
	issuing, ep := k8sIssuingCA(cfg), clusterEndpoint(cfg)
	if issuing == nil || ep == nil {
		return
	}

	endpoint, ca := ep.String(), string(issuing.Crt)

	k.mu.Lock()
	defer k.mu.Unlock()

	old := k.runs[endpoint]
	if k.stopped || (old != nil && old.ca == ca) {
		return
	}

	if old != nil {
		old.cancel()
		<-old.done
	}

	ctx, cancel := context.WithCancel(context.Background())
	r := newKubeRun(ca, cancel, "")

	if k.runs == nil {
		k.runs = map[string]*kubeRun{}
	}

	k.runs[endpoint] = r
	k.notifyLocked()

	k.started++

	dir, err := k.runDirLocked(k.started)
	if err != nil {
		r.fail(err)
		close(r.done)

		return
	}

	r.dir = dir
	k.powerLocked(endpoint).parked = nil

	go k.start(ctx, r, cfg, dir)
}

// recoverEtcd replaces the control plane of cfg's cluster with one whose etcd data directory is restored
// from the snapshot file at path, as Talos restores its etcd on a Bootstrap with RecoverEtcd and its
// static pods then reconnect: the restored cluster has the snapshot's keys and revision. The new
// processes start in the background (WaitReady waits for them); the snapshot file is read before it
// returns.
func (k *Kubernetes) recoverEtcd(cfg config.Provider, path string, skipHashCheck bool) error {
	issuing, ep := k8sIssuingCA(cfg), clusterEndpoint(cfg)
	if issuing == nil || ep == nil {
		return errors.New("machine config names no cluster to recover")
	}

	endpoint, ca := ep.String(), string(issuing.Crt)

	k.mu.Lock()
	defer k.mu.Unlock()

	if k.stopped {
		return ErrKubernetesStopped
	}

	if old := k.runs[endpoint]; old != nil {
		old.cancel()
		<-old.done
	}

	k.started++

	dir, err := k.runDirLocked(k.started)
	if err != nil {
		return err
	}

	// The snapshot is copied into the run's directory, which the restore reads after this returns.
	snap := filepath.Join(dir, "recover.snapshot")
	if err = copyFile(path, snap); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	r := newKubeRun(ca, cancel, dir)
	r.recoverFrom, r.skipHashCheck = snap, skipHashCheck
	k.powerLocked(endpoint).parked = nil

	if k.runs == nil {
		k.runs = map[string]*kubeRun{}
	}

	k.runs[endpoint] = r
	k.notifyLocked()

	go k.start(ctx, r, cfg, dir)

	return nil
}

// etcdSnapshot streams a snapshot of the etcd behind the ready control plane at endpoint, as etcd's
// Maintenance.Snapshot sends it (the backend database followed by its SHA-256). ok is false when no
// control plane is ready there.
func (k *Kubernetes) etcdSnapshot(ctx context.Context, endpoint string) (_ io.ReadCloser, ok bool, _ error) {
	k.mu.Lock()
	r := k.runs[endpoint]
	k.mu.Unlock()

	if r == nil {
		return nil, false, nil
	}

	select {
	case <-r.ready:
		if r.err != nil {
			return nil, false, nil
		}
	default:
		return nil, false, nil
	}

	tlsConfig, err := r.etcdTLS.ClientConfig()
	if err != nil {
		return nil, true, err
	}

	client, err := clientv3.New(clientv3.Config{
		Endpoints: []string{r.etcdURL}, TLS: tlsConfig, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, true, err
	}

	rc, err := client.Snapshot(ctx)
	if err != nil {
		client.Close() //nolint:errcheck // the snapshot error matters

		return nil, true, err
	}

	return &clientReadCloser{ReadCloser: rc, client: client}, true, nil
}

// clientReadCloser closes the etcd client whose stream it reads.
type clientReadCloser struct {
	io.ReadCloser

	client *clientv3.Client
}

func (c *clientReadCloser) Close() error {
	return errors.Join(c.ReadCloser.Close(), c.client.Close())
}

// restoreEtcdData restores the etcd data directory of a control plane in dir from the snapshot file, with
// etcdutl's restore, as Talos's etcd service does: a single-member cluster named and addressed as
// proc.EtcdArgs starts it.
func restoreEtcdData(dir, peerURL, snapshotPath string, skipHashCheck bool) error {
	err := etcdsnapshot.NewV3(zap.NewNop()).Restore(etcdsnapshot.RestoreConfig{
		SnapshotPath:        snapshotPath,
		Name:                proc.EtcdMemberName,
		OutputDataDir:       proc.EtcdDataDir(dir),
		PeerURLs:            []string{peerURL},
		InitialCluster:      proc.EtcdMemberName + "=" + peerURL,
		InitialClusterToken: "etcd-cluster",
		SkipHashCheck:       skipHashCheck,
	})
	if err != nil {
		return fmt.Errorf("restoring etcd from the snapshot: %w", err)
	}

	return os.Remove(snapshotPath)
}

// copyFile copies the file at src to a new file dst.
func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}

	defer in.Close() //nolint:errcheck // read-only

	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}

	defer func() { err = errors.Join(err, out.Close()) }()

	_, err = io.Copy(out, in)

	return err
}

// notifyLocked wakes WaitReady callers after runs changed.
func (k *Kubernetes) notifyLocked() {
	if k.changed != nil {
		close(k.changed)
	}

	k.changed = make(chan struct{})
}

// runDirLocked creates the directory of the nth control plane started.
func (k *Kubernetes) runDirLocked(n int) (string, error) {
	base := k.Dir
	if base == "" {
		if k.tmpDir == "" {
			dir, err := os.MkdirTemp("", "talossim-kubernetes-")
			if err != nil {
				return "", err
			}

			k.tmpDir = dir
		}

		base = k.tmpDir
	}

	dir := filepath.Join(base, "cluster-"+strconv.Itoa(n))

	return dir, os.MkdirAll(dir, 0o700)
}

// WaitReady blocks until the control plane at endpoint (the cluster endpoint URL as the machine config
// names it) is serving — its kube-apiserver ready, the bootstrap token and node RBAC installed, the
// controller manager healthy — and returns an admin client config signed by the cluster CA, or the
// error that stopped it. Before the cluster is bootstrapped it waits for that.
func (k *Kubernetes) WaitReady(ctx context.Context, endpoint string) (*rest.Config, error) {
	for {
		k.mu.Lock()
		if k.changed == nil {
			k.changed = make(chan struct{})
		}

		r, changed, stopped := k.runs[endpoint], k.changed, k.stopped
		k.mu.Unlock()

		if stopped {
			return nil, ErrKubernetesStopped
		}

		var ready chan struct{}
		if r != nil {
			ready = r.ready
		}

		select {
		case <-ready:
			if r.err != nil {
				return nil, r.err
			}

			k.mu.Lock()
			admin := rest.CopyConfig(r.admin) // replaced by a CA rotation
			k.mu.Unlock()

			return admin, nil
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the Kubernetes control plane at %s: %w", endpoint, ctx.Err())
		}
	}
}

// Bootstrapped reports whether a control plane was started at endpoint (it may be stopped now, with
// its cluster's control-plane nodes powered off).
func (k *Kubernetes) Bootstrapped(endpoint string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()

	return k.runs[endpoint] != nil || (k.power[endpoint] != nil && k.power[endpoint].parked != nil)
}

// Stop stops every control plane's processes and removes a temporary Dir.
// It waits for each run with k.mu released: a run's goroutines take it as
// they wind down.
func (k *Kubernetes) Stop() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()

		return
	}

	k.stopped = true

	runs := make([]*kubeRun, 0, len(k.runs))
	for _, r := range k.runs {
		runs = append(runs, r)
	}

	var parked []*kubeRun

	for _, p := range k.power {
		if p.parked != nil {
			parked = append(parked, p.parked)
		}
	}
	k.mu.Unlock()

	for _, r := range runs {
		r.cancel()
		<-r.done
	}

	for _, r := range parked {
		<-r.done
	}

	k.mu.Lock()
	k.notifyLocked()
	k.mu.Unlock()

	if k.tmpDir != "" && os.Getenv("ICHOR_KEEP_TEST_DIR") == "" {
		os.RemoveAll(k.tmpDir) //nolint:errcheck
	}
}

func (k *Kubernetes) logf(format string, args ...any) {
	if k.Logf != nil {
		k.Logf(format, args...)
	}
}

func (r *kubeRun) fail(err error) {
	r.err = err
	close(r.ready)
}

// start brings the processes up in order and then waits for ctx to stop them, newest first.
func (k *Kubernetes) start(ctx context.Context, r *kubeRun, cfg config.Provider, dir string) {
	defer close(r.done)
	defer func() {
		for i := len(r.procs) - 1; i >= 0; i-- {
			r.procs[i].Stop(15 * time.Second)
		}
	}()

	if err := k.startProcesses(ctx, r, cfg, dir); err != nil {
		k.logf("talossim: Kubernetes control plane failed: %v", err)
		r.fail(err)

		return
	}

	k.logf("talossim: Kubernetes control plane ready at %s", clusterEndpoint(cfg))
	close(r.ready)

	k.followAPIServerConfig(ctx, r)
}

func (k *Kubernetes) startProcesses(ctx context.Context, r *kubeRun, cfg config.Provider, dir string) error {
	endpoint, bind, err := apiServerAddress(cfg)
	if err != nil {
		return err
	}

	f, err := writeKubePKI(dir, cfg, endpoint, bind.Addr())
	if err != nil {
		return fmt.Errorf("writing control-plane certificates: %w", err)
	}

	if r.admin, err = clientcmd.RESTConfigFromKubeConfig(f.adminKubeconfig); err != nil {
		return fmt.Errorf("loading the admin kubeconfig: %w", err)
	}

	r.admin.QPS = -1

	ports, err := proc.FreePorts("127.0.0.1", 4)
	if err != nil {
		return err
	}

	etcdURL := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "https://127.0.0.1:" + strconv.Itoa(ports[1])

	r.etcdURL = etcdURL
	r.etcdTLS = transport.TLSInfo{CertFile: f.etcdClientCert, KeyFile: f.etcdClientKey, TrustedCAFile: f.etcdCA}

	if r.recoverFrom != "" {
		if err = restoreEtcdData(dir, peerURL, r.recoverFrom, r.skipHashCheck); err != nil {
			return err
		}
	}

	etcd, err := k.startProcess(r, dir, "etcd", proc.EtcdArgs(dir, etcdURL, peerURL, f.etcdCA, f.etcdServerCert, f.etcdServerKey)...)
	if err != nil {
		return err
	}

	if err = waitTLSHealthy(ctx, etcd, f.etcdCA, f.etcdClientCert, f.etcdClientKey, etcdURL+"/health"); err != nil {
		return err
	}

	args := []string{
		"--bind-address=" + bind.Addr().String(), "--advertise-address=" + bind.Addr().String(),
		"--secure-port=" + strconv.Itoa(int(bind.Port())),
		"--tls-cert-file=" + f.servingCert, "--tls-private-key-file=" + f.servingKey,
		"--etcd-servers=" + etcdURL, "--etcd-cafile=" + f.etcdCA,
		"--etcd-certfile=" + f.etcdClientCert, "--etcd-keyfile=" + f.etcdClientKey,
		"--client-ca-file=" + f.acceptedCAs,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true", // as Talos runs it: kube-proxy is privileged
		"--enable-admission-plugins=NodeRestriction",
		"--enable-bootstrap-token-auth=true",
		"--service-account-issuer=" + endpoint,
		"--service-account-key-file=" + filepath.Join(dir, serviceAccountPubFile),
		"--service-account-signing-key-file=" + filepath.Join(dir, serviceAccountKeyFile),
		"--encryption-provider-config=" + filepath.Join(dir, encryptionConfigFile),
		"--service-cluster-ip-range=" + strings.Join(prefixStrings(k8sNetwork(cfg).ServiceCIDRs()), ","),
		// No pods run here: the kubernetes Service would point at loopback.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}

	if f.frontProxyCA != "" {
		args = append(args,
			"--requestheader-client-ca-file="+f.frontProxyCA,
			"--requestheader-allowed-names="+frontProxyClientName,
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file="+f.frontProxyCert, "--proxy-client-key-file="+f.frontProxyKey,
		)
	}

	spec := apiServerSpecOf(cfg)
	if err = spec.writeHost(r.hostDir()); err != nil {
		return err
	}

	if spec.keysErr != nil {
		return spec.keysErr
	}

	if err = spec.keys.write(dir); err != nil {
		return err
	}

	// Written again when the control plane starts again from its directory.
	if err = writeAPIServerCA(r, f); err != nil {
		return err
	}

	r.apiBase, r.apiIndex = args, len(r.procs)
	r.apiHealthy = func(ctx context.Context, p *proc.Process) error {
		return waitTLSHealthy(ctx, p, f.acceptedCAs, f.adminCert, f.adminKey, endpoint+"/readyz")
	}

	k.mu.Lock()
	r.apiSpec, r.cas = spec.key(), spec.cas
	k.mu.Unlock()

	apiserver, err := k.startProcess(r, dir, "kube-apiserver", append(spec.flags(args, r.hostDir()), spec.keys.flags(dir)...)...)
	if err != nil {
		return err
	}

	if err = r.apiHealthy(ctx, apiserver); err != nil {
		return err
	}

	if err = applyBootstrapManifests(ctx, r.admin, cfg); err != nil {
		return fmt.Errorf("applying the bootstrap manifests: %w", err)
	}

	if err = k.startComponent(ctx, r, dir, "kube-controller-manager", f.controllerManagerKubeconfig, ports[2],
		f.controllerManagerServingCert, f.controllerManagerServingKey, f.acceptedCAs,
		"--controllers=csrsigning,csrapproving,csrcleaner,daemonset",
		"--use-service-account-credentials=true",
		"--cluster-signing-cert-file="+f.issuingCACert, "--cluster-signing-key-file="+f.issuingCAKey,
		"--root-ca-file="+f.acceptedCAs,
	); err != nil {
		return err
	}

	return k.startComponent(ctx, r, dir, "kube-scheduler", f.schedulerKubeconfig, ports[3],
		f.schedulerServingCert, f.schedulerServingKey, f.acceptedCAs)
}

// startComponent starts a control-plane component that talks to the API server with kubeconfig (for
// its work, authentication and authorization alike), alone (no leader election), serving HTTPS on
// 127.0.0.1:port with its own certificate, and waits for its /healthz.
func (k *Kubernetes) startComponent(ctx context.Context, r *kubeRun, dir, name, kubeconfig string, port int,
	servingCert, servingKey, caFile string, extra ...string,
) error {
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + servingCert, "--tls-private-key-file=" + servingKey,
	}, extra...)

	c := component{name: name, index: len(r.procs), args: args, healthy: func(ctx context.Context, p *proc.Process) error {
		return waitTLSHealthy(ctx, p, caFile, "", "", "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz")
	}}

	p, err := k.startProcess(r, dir, name, args...)
	if err != nil {
		return err
	}

	r.components = append(r.components, c)

	return c.healthy(ctx, p)
}

// startProcess starts one control-plane binary and records it for shutdown.
func (k *Kubernetes) startProcess(r *kubeRun, dir, name string, args ...string) (*proc.Process, error) {
	k.logf("talossim: starting %s", name)

	p, err := proc.Start(dir, name, filepath.Join(k.BinDir, name), args...)
	if err != nil {
		return nil, err
	}

	r.procs = append(r.procs, p)

	return p, nil
}

// apiServerAddress returns the kube-apiserver URL and the address to listen on from
// cluster.controlPlane.endpoint, which must name a loopback IP so that the simulator can serve it.
func apiServerAddress(cfg talosconfig.Config) (string, netip.AddrPort, error) {
	u := clusterEndpoint(cfg)
	if u == nil {
		return "", netip.AddrPort{}, errors.New("machine config has no cluster.controlPlane.endpoint")
	}

	port := u.Port()
	if port == "" {
		port = "6443"
	}

	ap, err := netip.ParseAddrPort(net.JoinHostPort(u.Hostname(), port))
	if err != nil || !ap.Addr().IsLoopback() {
		return "", netip.AddrPort{}, fmt.Errorf("cluster endpoint %s: the simulator serves Kubernetes only at a loopback IP:port", u)
	}

	return "https://" + ap.String(), ap, nil
}

// waitTLSHealthy polls url over TLS verified with caFile (and a client certificate when given).
func waitTLSHealthy(ctx context.Context, p *proc.Process, caFile, certFile, keyFile, url string) error {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}

	pool := stdx509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s holds no certificate", caFile)
	}

	tlsConfig := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}

	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return err
		}

		tlsConfig.Certificates = []tls.Certificate{cert}
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()

	return proc.WaitHealthy(ctx, p, client, url, kubeStartTimeout)
}

// nodesGroup is the group of every kubelet's client certificate.
const nodesGroup = "system:nodes"

// kubePKI are the paths of the control plane's credentials.
type kubePKI struct {
	acceptedCAs, issuingCACert, issuingCAKey                             string
	servingCert, servingKey                                              string
	etcdCA, etcdServerCert, etcdServerKey, etcdClientCert, etcdClientKey string
	frontProxyCA, frontProxyCert, frontProxyKey                          string
	adminCert, adminKey                                                  string
	controllerManagerKubeconfig                                          string
	controllerManagerServingCert, controllerManagerServingKey            string
	schedulerKubeconfig                                                  string
	schedulerServingCert, schedulerServingKey                            string
	adminKubeconfig                                                      []byte
}

// frontProxyClientName is the aggregation layer's client certificate CN.
const frontProxyClientName = "front-proxy-client"

// writeKubePKI writes the control plane's certificates, issued from the config's CAs, into dir.
func writeKubePKI(dir string, cfg talosconfig.Config, endpoint string, bindIP netip.Addr) (kubePKI, error) {
	var f kubePKI

	w := pkiWriter{dir: dir}

	issuing := k8sIssuingCA(cfg)
	if issuing == nil || len(issuing.Key) == 0 {
		return f, errors.New("cluster.ca has no key: only a control plane's config can start Kubernetes")
	}

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(issuing)
	if err != nil {
		return f, fmt.Errorf("cluster.ca: %w", err)
	}

	var bundle []byte // cluster.ca's certificate, then cluster.acceptedCAs
	for _, accepted := range k8sAcceptedCAs(cfg) {
		bundle = append(bundle, accepted.Crt...)
	}

	f.acceptedCAs = w.file("ca.crt", bundle, 0o644)
	f.issuingCACert = w.file("ca-issuing.crt", issuing.Crt, 0o644)
	f.issuingCAKey = w.file("ca-issuing.key", issuing.Key, 0o600)

	network := k8sNetwork(cfg)
	sans := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc." + network.DNSDomain(), bindIP.String(), "127.0.0.1"}

	if api := cfg.K8sAPIServerConfig(); api != nil {
		sans = append(sans, api.CertSANs()...)
	}

	for _, ip := range apiServerServiceIPs(network) {
		sans = append(sans, ip.String())
	}

	f.servingCert, f.servingKey = w.issue(ca, "kube-apiserver", serverCert("kube-apiserver", sans))
	f.controllerManagerServingCert, f.controllerManagerServingKey = w.issue(ca, "kube-controller-manager-serving",
		serverCert("kube-controller-manager", []string{"localhost", "127.0.0.1"}))
	f.adminCert, f.adminKey = w.issue(ca, "health-client", clientCert("talossim:health-check", "system:masters"))

	kcmCert, kcmKey := w.issue(ca, "kube-controller-manager-client", clientCert("system:kube-controller-manager"))
	f.controllerManagerKubeconfig = w.kubeconfig("kube-controller-manager.kubeconfig", endpoint, f.acceptedCAs, kcmCert, kcmKey)

	f.schedulerServingCert, f.schedulerServingKey = w.issue(ca, "kube-scheduler-serving",
		serverCert("kube-scheduler", []string{"localhost", "127.0.0.1"}))
	schedCert, schedKey := w.issue(ca, "kube-scheduler-client", clientCert("system:kube-scheduler"))
	f.schedulerKubeconfig = w.kubeconfig("kube-scheduler.kubeconfig", endpoint, f.acceptedCAs, schedCert, schedKey)

	cluster := cfg.Cluster()
	if cluster == nil {
		return f, errors.New("machine config has no cluster section")
	}

	etcdCA, err := x509.NewCertificateAuthorityFromCertificateAndKey(cluster.Etcd().CA())
	if err != nil {
		return f, fmt.Errorf("cluster.etcd.ca: %w", err)
	}

	f.etcdCA = w.file("etcd-ca.crt", cluster.Etcd().CA().Crt, 0o644)
	f.etcdServerCert, f.etcdServerKey = w.issue(etcdCA, "etcd-server", append(serverCert("etcd", []string{"localhost", "127.0.0.1"}),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth, stdx509.ExtKeyUsageClientAuth})))
	f.etcdClientCert, f.etcdClientKey = w.issue(etcdCA, "apiserver-etcd-client", clientCert("kube-apiserver"))

	var agg *x509.PEMEncodedCertificateAndKey
	if c := cfg.K8sAggregatorCAConfig(); c != nil {
		agg = c.IssuingCA()
	}

	if agg != nil && len(agg.Key) > 0 {
		aggCA, err := x509.NewCertificateAuthorityFromCertificateAndKey(agg)
		if err != nil {
			return f, fmt.Errorf("cluster.aggregatorCA: %w", err)
		}

		f.frontProxyCA = w.file("front-proxy-ca.crt", agg.Crt, 0o644)
		f.frontProxyCert, f.frontProxyKey = w.issue(aggCA, "front-proxy-client", clientCert(frontProxyClientName))
	}

	if f.adminKubeconfig, err = adminKubeconfig(cfg, time.Now()); err != nil {
		return f, err
	}

	return f, w.err
}

// serverCert returns the options of a serving certificate for names (IPs and DNS names).
func serverCert(cn string, names []string) []x509.Option {
	var (
		ips []net.IP
		dns []string
	)

	for _, name := range names {
		if ip := net.ParseIP(name); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, name)
		}
	}

	return []x509.Option{
		x509.CommonName(cn), x509.IPAddresses(ips), x509.DNSNames(dns),
		x509.NotAfter(time.Now().Add(x509.DefaultCertificateValidityDuration)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature | stdx509.KeyUsageKeyEncipherment),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	}
}

// clientCert returns the options of a client certificate for user cn in groups.
func clientCert(cn string, groups ...string) []x509.Option {
	return []x509.Option{
		x509.CommonName(cn), x509.Organization(groups...),
		x509.NotAfter(time.Now().Add(x509.DefaultCertificateValidityDuration)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature | stdx509.KeyUsageKeyEncipherment),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
	}
}

// pkiWriter writes credential files into dir, keeping the first error so that a sequence of writes
// reads straight.
type pkiWriter struct {
	dir string
	err error
}

func (w *pkiWriter) file(name string, data []byte, mode os.FileMode) string {
	path := filepath.Join(w.dir, name)

	if w.err == nil {
		w.err = os.WriteFile(path, data, mode)
	}

	return path
}

func (w *pkiWriter) issue(ca *x509.CertificateAuthority, name string, opts []x509.Option) (certFile, keyFile string) {
	if w.err != nil {
		return "", ""
	}

	kp, err := x509.NewKeyPair(ca, opts...)
	if err != nil {
		w.err = fmt.Errorf("issuing %s: %w", name, err)

		return "", ""
	}

	return w.file(name+".crt", kp.CrtPEM, 0o644), w.file(name+".key", kp.KeyPEM, 0o600)
}

func (w *pkiWriter) kubeconfig(name, server, caFile, certFile, keyFile string) string {
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: user
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: default
  context: {cluster: cluster, user: user}
current-context: default
`, server, caFile, certFile, keyFile)

	return w.file(name, []byte(data), 0o600)
}
