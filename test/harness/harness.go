// Package harness starts a real Kubernetes control plane for tests and for
// `make run`: etcd and kube-apiserver built from source by
// hack/build-controlplane.sh, both with TLS, RBAC and front-proxy
// certificates generated here, and ichor-apiserver registered behind the
// kube-apiserver's aggregator through an APIService with a real caBundle.
package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/oidcprovider"
)

// Options tune a control plane.
type Options struct {
	// Dir holds certificates, data and logs; a temporary directory when empty.
	Dir string
	// IchorBinary runs ichor-apiserver as a process of this binary; when empty
	// it runs in this process, from the same options and flags.
	IchorBinary string
	// IchorEmbeddedEtcd makes ichor-apiserver use its embedded etcd instead
	// of the control plane's.
	IchorEmbeddedEtcd bool
	// IchorArgs are extra ichor-apiserver flags, after the harness's own.
	IchorArgs []string
	// HA runs the shape artifacts/ha (the chart with two replicas) installs: IchorReplicas processes of
	// IchorBinary behind one Service, on an etcd cluster of their own of
	// IchorEtcdMembers members.
	HA bool
	// NoIchor starts etcd, kube-apiserver and kube-controller-manager only,
	// for a test that installs Ichor itself (the chart).
	NoIchor bool
	// Workloads runs what Deployments need to become running Pods, but
	// the node: kube-scheduler, and kube-controller-manager's deployment,
	// replicaset, garbage-collector, persistentvolume-binder,
	// root-ca-cert-publisher, node-lifecycle, endpointslice (the aggregator
	// wants an APIService's Service to have ready endpoints) and the
	// claim and volume protection controllers. A test adds the node (test/mgmtnode), which runs the Pods
	// bound to it.
	Workloads bool
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
}

// ControlPlane is a running etcd, kube-apiserver and ichor-apiserver.
type ControlPlane struct {
	// Dir holds certificates, data and logs.
	Dir string
	// BinDir holds the control-plane binaries (kubectl among them).
	BinDir string
	// URL is the kube-apiserver's address.
	URL string
	// AdminConfig authenticates as a member of system:masters.
	AdminConfig *rest.Config
	// AdminKubeconfig is AdminConfig as a kubeconfig file, for kubectl.
	AdminKubeconfig string
	// IchorURL is ichor-apiserver's own address (behind the aggregator).
	IchorURL string
	// AuditLog is ichor-apiserver's audit log, written with the policy of
	// artifacts/audit-policy.yaml.
	AuditLog string
	// ControllerUpload is where ichor-apiserver sends uploads: a controller
	// that serves them listens there (its --upload-bind-address and
	// serving certificate).
	ControllerUpload UploadEndpoint
	// Auth is where ichor-auth, Ichor's token issuer, is to serve: the
	// kube-apiserver trusts tokens from that issuer URL (artifacts/kube-
	// apiserver/authentication-config.yaml). A test starts it there.
	Auth IssuerEndpoint
	// OIDC is the external OpenID provider (test/oidcprovider), which the
	// harness runs, with the people of oidcprovider.People.
	OIDC IssuerEndpoint
	// ServiceCIDR is where Services get their cluster IPs: a /24 on
	// loopback, chosen at random so that control planes running side by
	// side rarely share one, so that whatever dials a Service (the
	// aggregator dials the APIService's) stays on this machine.
	ServiceCIDR netip.Prefix

	files   files
	ichorCA []byte
	ownDir  bool
	etcdURL string
	etcd    *proc.Process
	kube    *proc.Process
	kcm     *proc.Process
	sched   *proc.Process
	// ichorPorts are ichor-apiserver's port and its embedded etcd's client and peer ports.
	ichorPorts []int
	ichor      *ichorServer
	ha         *haShape
	kubeArgs   []string
	logf       func(string, ...any)
	kubeClient kubernetes.Interface
	oidc       *oidcprovider.Server
}

// UploadEndpoint is ichor-controller's upload endpoint as the harness
// configures ichor-apiserver to reach it.
type UploadEndpoint struct {
	Address, CertFile, KeyFile string
	// CAFile issued CertFile.
	CAFile string
}

// IssuerEndpoint is an OpenID issuer the kube-apiserver trusts: its URL, the
// address it listens on, and its serving certificate.
type IssuerEndpoint struct {
	URL, Address, CertFile, KeyFile string
	// CAFile issued CertFile.
	CAFile string
}

// startTimeout bounds each component's start.
const startTimeout = 90 * time.Second

// Start brings up the whole control plane and returns once ichor.dev is
// Available through the aggregator. Stop it with Stop.
func Start(ctx context.Context, opts Options) (cp *ControlPlane, err error) {
	cp = &ControlPlane{Dir: opts.Dir, logf: opts.Logf}
	if cp.logf == nil {
		cp.logf = func(string, ...any) {}
	}
	defer func() {
		if err != nil {
			cp.Stop()
			cp = nil
		}
	}()
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "ichor-controlplane-"); err != nil {
			return nil, err
		}
		cp.ownDir = true
	}
	if cp.BinDir, err = BinDir(); err != nil {
		return nil, err
	}
	pkiDir := filepath.Join(cp.Dir, "pki")
	if err = os.MkdirAll(pkiDir, 0o700); err != nil {
		return nil, err
	}
	cp.ServiceCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(96 + rand.IntN(32)), byte(rand.IntN(256)), 0}), 24)
	if cp.files, cp.ichorCA, err = writePKI(pkiDir, cp.ServiceCIDR.Addr().Next()); err != nil {
		return nil, fmt.Errorf("generate certificates: %w", err)
	}
	// Every port is chosen in one call, so no two components are handed the same one.
	ports, err := proc.FreePorts("127.0.0.1", 11)
	if err != nil {
		return nil, err
	}
	cp.ichorPorts = ports[4:7]
	cp.ControllerUpload = UploadEndpoint{Address: "127.0.0.1:" + strconv.Itoa(ports[7]),
		CertFile: cp.files.controllerServingCert, KeyFile: cp.files.controllerServingKey, CAFile: cp.files.controllerCA}
	cp.Auth = issuerAt(ports[8], cp.files.authServingCert, cp.files.authServingKey, cp.files.issuersCA)
	cp.OIDC = issuerAt(ports[9], cp.files.oidcServingCert, cp.files.oidcServingKey, cp.files.issuersCA)
	// The OpenID provider first, so that kube-apiserver finds it at start.
	oidcLog, err := os.Create(filepath.Join(cp.Dir, "oidc-provider.log"))
	if err != nil {
		return nil, err
	}
	if cp.oidc, err = oidcprovider.Start(cp.OIDC.URL, cp.OIDC.Address, cp.OIDC.CertFile, cp.OIDC.KeyFile, oidcLog); err != nil {
		return nil, fmt.Errorf("start the OpenID provider: %w", err)
	}
	if err = cp.startEtcd(ctx, ports[0], ports[1]); err != nil {
		return nil, err
	}
	if err = cp.startKubeAPIServer(ctx, ports[2]); err != nil {
		return nil, err
	}
	if err = cp.startControllerManager(ctx, ports[3], opts.Workloads); err != nil {
		return nil, err
	}
	if opts.Workloads {
		if err = cp.startScheduler(ports[10]); err != nil {
			return nil, err
		}
	}
	if opts.NoIchor {
		return cp, nil
	}
	if err = cp.installIchorAccess(ctx); err != nil {
		return nil, err
	}
	if opts.HA {
		err = cp.startHA(ctx, opts)
	} else {
		err = cp.startIchor(ctx, opts)
	}
	if err != nil {
		return nil, err
	}
	if err = cp.registerAPIService(ctx); err != nil {
		return nil, err
	}
	return cp, nil
}

// Stop stops every component, newest first, so each can shut down cleanly
// while what it depends on still runs, and removes a temporary Dir.
func (cp *ControlPlane) Stop() {
	if cp == nil {
		return
	}
	_ = cp.ichor.stop()
	cp.ha.stop()
	cp.sched.Stop(10 * time.Second)
	cp.kcm.Stop(10 * time.Second)
	cp.kube.Stop(15 * time.Second)
	cp.etcd.Stop(10 * time.Second)
	_ = cp.oidc.Stop()
	if cp.ownDir && os.Getenv("ICHOR_KEEP_TEST_DIR") == "" {
		os.RemoveAll(cp.Dir)
	}
}

// StopIchor stops only ichor-apiserver, gracefully, and returns how it ended.
func (cp *ControlPlane) StopIchor() error {
	err := cp.ichor.stop()
	cp.ichor = nil
	return err
}

func (cp *ControlPlane) bin(name string) string { return filepath.Join(cp.BinDir, name) }

func (cp *ControlPlane) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	f := cp.files
	cp.etcdURL = "https://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "https://127.0.0.1:" + strconv.Itoa(peerPort)
	var err error
	cp.etcd, err = proc.Start(cp.Dir, "etcd", cp.bin("etcd"),
		proc.EtcdArgs(cp.Dir, cp.etcdURL, peerURL, f.etcdCA, f.etcdServerCert, f.etcdServerKey)...)
	if err != nil {
		return err
	}
	client, err := tlsClient(f.etcdCA, f.etcdClientCert, f.etcdClientKey)
	if err != nil {
		return err
	}
	cp.logf("waiting for etcd at %s", cp.etcdURL)
	return proc.WaitHealthy(ctx, cp.etcd, client, cp.etcdURL+"/health", startTimeout)
}

func (cp *ControlPlane) startKubeAPIServer(ctx context.Context, port int) error {
	f := cp.files
	cp.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	authConfig, err := cp.writeAuthenticationConfig()
	if err != nil {
		return err
	}
	cp.kubeArgs = []string{
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + f.kubeServingCert, "--tls-private-key-file=" + f.kubeServingKey,
		"--etcd-servers=" + cp.etcdURL, "--etcd-cafile=" + f.etcdCA,
		"--etcd-certfile=" + f.etcdClientCert, "--etcd-keyfile=" + f.etcdClientKey,
		"--client-ca-file=" + f.clientCA,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + f.saPub, "--service-account-signing-key-file=" + f.saKey,
		"--service-cluster-ip-range=" + cp.ServiceCIDR.String(),
		// The front proxy: how the aggregator tells ichor-apiserver who is calling.
		"--requestheader-client-ca-file=" + f.frontProxyCA,
		"--requestheader-allowed-names=" + frontProxyClient,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f.frontProxyCert, "--proxy-client-key-file=" + f.frontProxyKey,
		// People: Ichor's issuer and the OpenID provider, as artifacts/ configures them.
		"--authentication-config=" + authConfig,
		// No kubelets or pods here: the kubernetes Service would point at loopback.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
	if cp.kube, err = proc.Start(cp.Dir, "kube-apiserver", cp.bin("kube-apiserver"), cp.kubeArgs...); err != nil {
		return err
	}
	cp.AdminConfig = &rest.Config{
		Host:            cp.URL,
		TLSClientConfig: rest.TLSClientConfig{CAFile: f.kubeCA, CertFile: f.adminCert, KeyFile: f.adminKey},
		QPS:             -1, // no client-side throttling in tests
	}
	if cp.AdminKubeconfig, err = writeKubeconfig(filepath.Join(cp.Dir, "admin.kubeconfig"), cp.URL, f.kubeCA, f.adminCert, f.adminKey); err != nil {
		return err
	}
	if err := cp.waitKubeAPIServer(ctx); err != nil {
		return err
	}
	cp.kubeClient, err = kubernetes.NewForConfig(cp.AdminConfig)
	return err
}

func (cp *ControlPlane) waitKubeAPIServer(ctx context.Context) error {
	f := cp.files
	client, err := tlsClient(f.kubeCA, f.adminCert, f.adminKey)
	if err != nil {
		return err
	}
	cp.logf("waiting for kube-apiserver at %s", cp.URL)
	return proc.WaitHealthy(ctx, cp.kube, client, cp.URL+"/readyz", startTimeout)
}

// RestartKubeAPIServer stops kube-apiserver gracefully, starts it again
// with the same flags and waits until it is ready.
func (cp *ControlPlane) RestartKubeAPIServer(ctx context.Context) error {
	if err := cp.kube.Stop(30 * time.Second); err != nil {
		cp.logf("kube-apiserver ended with %v", err)
	}
	var err error
	if cp.kube, err = proc.Start(cp.Dir, "kube-apiserver", cp.bin("kube-apiserver"), cp.kubeArgs...); err != nil {
		return err
	}
	return cp.waitKubeAPIServer(ctx)
}

// startControllerManager runs kube-controller-manager with the controllers a
// management cluster needs here: ClusterRole aggregation, which fills Ichor's
// aggregated roles, and namespace deletion; with workloads, those that turn
// Deployments into Pods, bind claims to volumes, publish kube-root-ca.crt,
// take a node's not-ready taint away once it reports Ready, and list ready
// pods as their Services' endpoints.
func (cp *ControlPlane) startControllerManager(ctx context.Context, port int, workloads bool) error {
	// Namespace deletion empties namespaces through discovery, Ichor's resources included.
	controllers := "clusterrole-aggregation,namespace"
	if workloads {
		controllers += ",deployment,replicaset,garbagecollector,persistentvolume-binder,root-ca-cert-publisher,nodelifecycle,endpointslice,pvc-protection,pv-protection"
	}
	var err error
	cp.kcm, err = proc.Start(cp.Dir, "kube-controller-manager", cp.bin("kube-controller-manager"),
		"--kubeconfig="+cp.AdminKubeconfig,
		"--authentication-kubeconfig="+cp.AdminKubeconfig,
		"--authorization-kubeconfig="+cp.AdminKubeconfig,
		"--controllers="+controllers,
		"--root-ca-file="+cp.files.kubeCA,
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(cp.Dir, "kcm-certs"),
	)
	// Its readiness shows in installIchorAccess, which waits for the aggregated roles.
	return err
}

// startScheduler runs kube-scheduler, which binds Pods to the test's node.
func (cp *ControlPlane) startScheduler(port int) error {
	var err error
	cp.sched, err = proc.Start(cp.Dir, "kube-scheduler", cp.bin("kube-scheduler"),
		"--kubeconfig="+cp.AdminKubeconfig,
		"--authentication-kubeconfig="+cp.AdminKubeconfig,
		"--authorization-kubeconfig="+cp.AdminKubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(cp.Dir, "scheduler-certs"),
	)
	return err
}

// EtcdValues returns the values stored under keys of the etcd ichor-apiserver
// writes to that end in suffix, for tests that check what is persisted
// rather than what the API returns. It needs the shared etcd (not
// IchorEmbeddedEtcd).
// etcdClient is a client of the control plane's etcd, which holds Ichor's objects too.
func (cp *ControlPlane) etcdClient() (*clientv3.Client, error) {
	tlsInfo := transport.TLSInfo{CertFile: cp.files.etcdClientCert, KeyFile: cp.files.etcdClientKey, TrustedCAFile: cp.files.etcdCA}
	tlsConfig, err := tlsInfo.ClientConfig()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: []string{cp.etcdURL}, TLS: tlsConfig, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
}

// EtcdDelete removes the stored object whose key ends in suffix
// (/ichorusers/NAME), past every admission rule: how a test removes what the
// API rightly refuses to delete, such as the last enabled admin.
func (cp *ControlPlane) EtcdDelete(ctx context.Context, suffix string) error {
	client, err := cp.etcdClient()
	if err != nil {
		return err
	}
	defer client.Close() //nolint:errcheck
	resp, err := client.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		if strings.HasSuffix(string(kv.Key), suffix) {
			if _, err := client.Delete(ctx, string(kv.Key)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (cp *ControlPlane) EtcdValues(ctx context.Context, suffix string) ([][]byte, error) {
	client, err := cp.etcdClient()
	if err != nil {
		return nil, err
	}
	defer client.Close() //nolint:errcheck
	resp, err := client.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, kv := range resp.Kvs {
		if strings.HasSuffix(string(kv.Key), suffix) {
			out = append(out, kv.Value)
		}
	}
	return out, nil
}
