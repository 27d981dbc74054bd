package talossim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	k8sres "github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	v1alpha1res "github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/imageref"
)

// A simulated kubelet runs on every configured node whose Options.Kubernetes is set, from boot (or
// from the config change that restarts the kubelet on Talos) until the node reboots, shuts down,
// resets or stops. It does what a kubelet does with the API server, using the kubelet's own
// certificate manager from client-go, so CSRs, backoff and rotation are the real code's:
//
//   - TLS bootstrap: with cluster.token as its bootstrap token it requests a client certificate
//     (signer kubernetes.io/kube-apiserver-client-kubelet, CN system:node:<nodename>, O system:nodes),
//     which the controller manager approves and signs;
//   - registers its Node (addresses, capacity, Ready) as system:node:<nodename>;
//   - with serverTLSBootstrap (in machine.kubelet.extraConfig, or from v1.14 in the KubeletConfig
//     document's config) it requests its serving certificate (signer kubernetes.io/kubelet-serving, SANs: the hostname and node IPs), retrying with the
//     kubelet's backoff (2s doubling to 32s, then every 32s) while it is denied or fails, and serves
//     HTTPS on its kubelet port with the issued certificate once there is one (until then handshakes
//     fail, as with a real kubelet); without it, a self-signed certificate, as a kubelet makes.
//
// The client and serving certificates live on the EPHEMERAL partition, as under /var/lib/kubelet/pki:
// they survive reboots and are wiped by a reset that wipes EPHEMERAL.

// kubeletSpec is what the kubelet is started from; a change restarts it.
type kubeletSpec struct {
	nodeName           string
	hostname           string
	endpoint           string
	caPEM              string
	token              string
	serverTLSBootstrap bool
	controlPlane       bool
	taintControlPlane  bool
	image              string
	version            string
	ips                []netip.Addr
}

// kubeletCerts are the kubelet's certificate stores, kept across kubelet restarts.
type kubeletCerts struct {
	client, serving *memoryStore
}

// validFor reports whether the client certificate, if any, is spec's node's and verifies against
// spec's CAs.
func (c *kubeletCerts) validFor(spec kubeletSpec) bool {
	cert, err := c.client.Current()
	if err != nil || cert == nil || cert.Leaf == nil {
		return true // none yet: the kubelet bootstraps anyway
	}

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(spec.caPEM))

	_, err = cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})

	return err == nil && cert.Leaf.Subject.CommonName == "system:node:"+spec.nodeName
}

// kubelet is one run of a node's simulated kubelet.
type kubelet struct {
	spec   kubeletSpec
	cancel context.CancelFunc
}

// Kubelet ports and timings.
const (
	kubeletAPIPollInterval = 250 * time.Millisecond
	kubeletRetryInterval   = time.Second
)

// kubeletSpecLocked returns the kubelet the node should run now, and false when none should run.
func (n *Node) kubeletSpecLocked() (kubeletSpec, bool) {
	if n.opts.Kubernetes == nil || n.stopped || (n.phase != PhaseRunning && n.phase != PhaseUpgrading && n.phase != PhaseShuttingDown) ||
		!n.configuredLocked() || n.active.Cluster() == nil || n.active.Machine() == nil || n.active.K8sKubeletConfig() == nil {
		return kubeletSpec{}, false
	}

	cfg := n.active
	endpoint, token := clusterEndpoint(cfg), cfg.Cluster().Token()
	cas := k8sAcceptedCAs(cfg) // cluster.ca's certificate, then cluster.acceptedCAs

	if endpoint == nil || len(cas) == 0 || token == nil {
		return kubeletSpec{}, false
	}

	var ca strings.Builder
	for _, accepted := range cas {
		ca.Write(accepted.Crt)
	}

	hostname := n.hostnameLocked()
	kubelet := cfg.K8sKubeletConfig() // machine.kubelet, or from v1.14 the KubeletConfig document
	bootstrap, _ := kubelet.ExtraConfig()["serverTLSBootstrap"].(bool)
	controlPlane := cfg.Machine().Type().IsControlPlane()

	// The control-plane NoSchedule taint: Talos's from machine.type unless
	// cluster.allowSchedulingOnControlPlanes, or from v1.14 the KubeNodeConfig document's.
	var taints map[string]string
	if node := cfg.K8sNodeConfig(); node != nil {
		taints = node.Taints()
	}

	return kubeletSpec{
		nodeName:           strings.ToLower(hostname),
		hostname:           hostname,
		endpoint:           endpoint.String(),
		caPEM:              ca.String(),
		token:              token.ID() + "." + token.Secret(),
		serverTLSBootstrap: bootstrap,
		controlPlane:       controlPlane,
		taintControlPlane:  controlPlane && taints[constants.LabelNodeRoleControlPlane] == constants.TaintEffectNoSchedule,
		image:              kubelet.Image(),
		version:            imageref.Tag(kubelet.Image()),
		ips:                n.nodeIPs(),
	}, true
}

// nodeIPs are the kubelet's node IPs: the node's addresses, or its listen IP without any.
func (n *Node) nodeIPs() []netip.Addr {
	if len(n.opts.Addresses) == 0 {
		return []netip.Addr{n.listenIP}
	}

	ips := make([]netip.Addr, 0, len(n.opts.Addresses))
	for _, p := range n.opts.Addresses {
		ips = append(ips, p.Addr())
	}

	return ips
}

// syncKubeletLocked starts, restarts or stops the kubelet to match the node's state. It never waits:
// a stopped kubelet winds down in the background (and Stop waits for it).
func (n *Node) syncKubeletLocked() {
	spec, want := n.kubeletSpecLocked()

	if n.kubelet != nil && (!want || !reflect.DeepEqual(n.kubelet.spec, spec)) {
		n.kubelet.cancel()
		n.kubelet = nil
		// The kubelet service stops: its Service resource goes, and a new run creates it again.
		_ = removeResource(context.Background(), n.st, v1alpha1res.NewService(kubeletServiceID).Metadata()) //nolint:errcheck // in-memory state
	}

	if !want || n.kubelet != nil {
		return
	}

	if n.kubeletCerts == nil || !n.kubeletCerts.validFor(spec) {
		// As Talos does before it starts the kubelet: a client certificate of another node name, or
		// that none of the cluster's CAs verifies (after a CA rotation), goes with the kubelet's whole
		// PKI directory, and the kubelet bootstraps again.
		n.kubeletCerts = &kubeletCerts{client: newMemoryStore(), serving: newMemoryStore()}
	}

	ctx, cancel := context.WithCancel(context.Background())
	n.kubelet = &kubelet{spec: spec, cancel: cancel}
	certs := n.kubeletCerts

	n.wg.Go(func() { n.runKubelet(ctx, spec, certs) })
}

// restartKubeletLocked stops the running kubelet, if any, and starts a new run from the same spec and
// certificates, as a restart of the kubelet service does.
func (n *Node) restartKubeletLocked() {
	if n.kubelet != nil {
		n.kubelet.cancel()
		n.kubelet = nil
		_ = removeResource(context.Background(), n.st, v1alpha1res.NewService(kubeletServiceID).Metadata()) //nolint:errcheck // in-memory state
	}

	n.events.add(&machine.ServiceStateEvent{Service: "kubelet", Action: machine.ServiceStateEvent_RUNNING, Message: "Service restarted"}, "")
	n.syncKubeletLocked()
}

// runKubelet is one kubelet run: wait for the API server, bootstrap, register, serve.
func (n *Node) runKubelet(ctx context.Context, spec kubeletSpec, certs *kubeletCerts) {
	logger := klog.Background().WithValues("node", spec.nodeName)
	ctx = klog.NewContext(ctx, logger)

	base := &rest.Config{Host: spec.endpoint, TLSClientConfig: rest.TLSClientConfig{CAData: []byte(spec.caPEM)}, QPS: -1}

	if err := waitAPIServer(ctx, base); err != nil {
		return
	}

	clientManager, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(current *tls.Certificate) (kubernetes.Interface, error) {
			cfg := rest.CopyConfig(base)
			if current == nil {
				cfg.BearerToken = spec.token
			} else {
				cfg.CertData, cfg.KeyData = certs.client.pem()
			}

			return kubernetes.NewForConfig(cfg)
		},
		Template: &x509.CertificateRequest{Subject: pkix.Name{
			CommonName: "system:node:" + spec.nodeName, Organization: []string{nodesGroup},
		}},
		SignerName:       certificatesv1.KubeAPIServerClientKubeletSignerName,
		GetUsages:        certificate.DefaultKubeletClientGetUsages,
		CertificateStore: certs.client,
		Name:             "kubelet-client",
		Ctx:              &ctx,
	})
	if err != nil {
		logger.Error(err, "creating the kubelet client certificate manager")

		return
	}

	clientManager.Start()
	defer clientManager.Stop()

	if err = certs.client.wait(ctx); err != nil {
		return
	}

	nodeConfig := rest.CopyConfig(base)
	nodeConfig.CertData, nodeConfig.KeyData = certs.client.pem()

	client, err := kubernetes.NewForConfig(nodeConfig)
	if err != nil {
		logger.Error(err, "creating the kubelet client")

		return
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(spec.ips[0].String(), strconv.Itoa(n.opts.KubeletPort)))
	if err != nil {
		logger.Error(err, "listening on the kubelet port")

		return
	}

	defer ln.Close() //nolint:errcheck

	getCertificate, stopServing, err := n.kubeletServingCertificate(ctx, spec, certs, client)
	if err != nil {
		logger.Error(err, "setting up the kubelet serving certificate")

		return
	}

	defer stopServing()

	srv := &http.Server{
		Handler:           kubeletHandler(),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCertificate},
		ReadHeaderTimeout: 10 * time.Second,
		// Failed handshakes (no serving certificate yet, clients that do not trust it) are expected.
		ErrorLog: log.New(io.Discard, "", 0),
	}

	go srv.ServeTLS(ln, "", "") //nolint:errcheck

	defer srv.Close() //nolint:errcheck

	port := ln.Addr().(*net.TCPAddr).Port

	// Registration is retried until it succeeds, like the kubelet's node status loop.
	_ = wait.PollUntilContextCancel(ctx, kubeletRetryInterval, true, func(ctx context.Context) (bool, error) {
		if err := registerNode(ctx, client, spec, int32(port)); err != nil {
			logger.Info("registering the node", "err", err)

			return false, nil
		}

		return true, nil
	})

	// A node that runs again uncordons its Node if Talos cordoned it to shut down (drain.go).
	_ = wait.PollUntilContextCancel(ctx, kubeletRetryInterval, true, func(ctx context.Context) (bool, error) {
		if err := n.uncordonIfCordonedByTalos(ctx, spec); err != nil {
			logger.Info("uncordoning the Node", "err", err)

			return false, nil
		}

		return true, nil
	})

	// The pods bound to the node "run" (pods.go); a control plane's mirror pods follow its component
	// configs.
	var mirrors *mirrorPods
	if spec.controlPlane {
		mirrors = &mirrorPods{client: client, spec: spec, st: n.st, apiServerSettled: n.apiServerSettled}

		// Talos labels a control plane's Node with its role (NodeRestriction keeps the kubelet
		// from doing it), with the control plane's own admin credentials.
		_ = wait.PollUntilContextCancel(ctx, kubeletRetryInterval, true, func(ctx context.Context) (bool, error) {
			if err := n.labelControlPlane(ctx, spec); err != nil {
				logger.Info("labelling the control plane's Node", "err", err)

				return false, nil
			}

			return true, nil
		})
	}

	var pods sync.WaitGroup
	defer pods.Wait()

	pods.Go(func() { runPods(ctx, client, spec.nodeName, spec.ips[0].String()) })

	if mirrors == nil {
		<-ctx.Done()

		return
	}

	_ = wait.PollUntilContextCancel(ctx, kubeletAPIPollInterval, true, func(ctx context.Context) (bool, error) {
		if err := mirrors.sync(ctx); err != nil {
			logger.Info("syncing mirror pods", "err", err)
		}

		return false, nil
	})
}

// controlPlaneLabel marks a control plane's Node, as Talos labels it.
const controlPlaneLabel = "node-role.kubernetes.io/control-plane"

// labelControlPlane sets controlPlaneLabel on the Node of spec.
func (n *Node) labelControlPlane(ctx context.Context, spec kubeletSpec) error {
	cs, err := n.adminClient(ctx, spec)
	if err != nil {
		return err
	}

	patch := []byte(`{"metadata":{"labels":{"` + controlPlaneLabel + `":""}}}`)
	_, err = cs.CoreV1().Nodes().Patch(ctx, spec.nodeName, types.MergePatchType, patch, metav1.PatchOptions{})

	return err
}

// kubeletServiceID is the kubelet's Service resource.
const kubeletServiceID = "kubelet"

// publishKubelet puts the kubelet's KubeletSpec and its Service (running and healthy) while a kubelet
// runs, and removes them otherwise.
func publishKubelet(ctx context.Context, st state.State, v nodeView) error {
	ks := k8sres.NewKubeletSpec(k8sres.NamespaceName, kubeletServiceID)
	svc := v1alpha1res.NewService(kubeletServiceID)

	if v.kubelet == nil {
		if err := removeResource(ctx, st, ks.Metadata()); err != nil {
			return err
		}

		return removeResource(ctx, st, svc.Metadata())
	}

	ks.TypedSpec().Image = v.kubelet.image
	svc.TypedSpec().Running, svc.TypedSpec().Healthy = true, true

	if err := putResource(ctx, st, ks); err != nil {
		return err
	}

	return putResource(ctx, st, svc)
}

// kubeletServingCertificate returns the serving certificate source: the certificate manager of the
// serving CSR flow with serverTLSBootstrap, a self-signed certificate otherwise.
func (n *Node) kubeletServingCertificate(ctx context.Context, spec kubeletSpec, certs *kubeletCerts, client kubernetes.Interface) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), func(), error) {
	if !spec.serverTLSBootstrap {
		cert, err := selfSignedKubeletCertificate(spec)
		if err != nil {
			return nil, nil, err
		}

		return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }, func() {}, nil
	}

	manager, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		GetTemplate: func() *x509.CertificateRequest { return n.kubeletServingTemplate(spec) },
		SignerName:  certificatesv1.KubeletServingSignerName,
		GetUsages:   certificate.DefaultKubeletServingGetUsages,

		CertificateStore: certs.serving,
		Name:             "kubelet-serving",
		Ctx:              &ctx,
	})
	if err != nil {
		return nil, nil, err
	}

	manager.Start()

	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		cert := manager.Current()
		if cert == nil {
			return nil, errors.New("no serving certificate available for the kubelet")
		}

		return cert, nil
	}, manager.Stop, nil
}

// kubeletServingTemplate is the serving CSR the kubelet asks for, as the kubelet builds it from its
// node's addresses: CN system:node:<nodename>, O system:nodes, the hostname as DNS name and the node
// IPs, plus whatever the node's KubeletServing faults add.
func (n *Node) kubeletServingTemplate(spec kubeletSpec) *x509.CertificateRequest {
	faults := n.Faults()

	dns := append([]string{spec.hostname}, faults.KubeletServingExtraDNSNames...)

	var ips []net.IP
	for _, ip := range append(slices.Clone(spec.ips), faults.KubeletServingExtraIPs...) {
		ips = append(ips, ip.AsSlice())
	}

	return &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + spec.nodeName, Organization: []string{nodesGroup}},
		DNSNames:    dns,
		IPAddresses: ips,
	}
}

// registerNode creates the kubelet's Node, or updates the status of the one it registered before.
func registerNode(ctx context.Context, client kubernetes.Interface, spec kubeletSpec, port int32) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: spec.nodeName,
			Labels: map[string]string{
				corev1.LabelHostname:   spec.nodeName,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
			},
		},
		Status: nodeStatus(spec, port),
	}

	if spec.taintControlPlane {
		node.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	}

	_, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}

	existing, err := client.CoreV1().Nodes().Get(ctx, spec.nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}

	existing.Status = node.Status
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, existing, metav1.UpdateOptions{})

	return err
}

// nodeStatus is the status a kubelet reports for spec's node.
func nodeStatus(spec kubeletSpec, port int32) corev1.NodeStatus {
	now := metav1.Now()

	addresses := make([]corev1.NodeAddress, 0, len(spec.ips)+1)
	for _, ip := range spec.ips {
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}

	addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: spec.hostname})

	// What the scheduler fits pods into: a kubelet's default of 110 pods.
	resources := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("4"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
	}

	return corev1.NodeStatus{
		Capacity:        resources,
		Allocatable:     resources,
		Addresses:       addresses,
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: port}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          spec.version,
			OperatingSystem:         "linux",
			Architecture:            "amd64",
			OSImage:                 "Talos (simulated)",
			ContainerRuntimeVersion: "containerd://2.1.0",
		},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}
}

// kubeletHandler answers the kubelet's health endpoint.
func kubeletHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok")) //nolint:errcheck
	})

	return mux
}

// waitAPIServer polls the API server's /readyz (anonymous, as the kubelet's first requests would be
// refused until it answers) until it is ready or ctx ends.
func waitAPIServer(ctx context.Context, cfg *rest.Config) error {
	anonymous := rest.AnonymousClientConfig(cfg)

	client, err := rest.HTTPClientFor(anonymous)
	if err != nil {
		return err
	}

	defer client.CloseIdleConnections()

	return wait.PollUntilContextCancel(ctx, kubeletAPIPollInterval, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
		if err != nil {
			return false, err
		}

		resp, err := client.Do(req)
		if err != nil {
			return false, nil //nolint:nilerr // not up yet
		}

		resp.Body.Close() //nolint:errcheck

		return resp.StatusCode == http.StatusOK, nil
	})
}

// selfSignedKubeletCertificate is the certificate a kubelet without serverTLSBootstrap makes for
// itself: self-signed, named "<hostname>@<unix time>", valid for the hostname and node IPs.
func selfSignedKubeletCertificate(spec kubeletSpec) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}

	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", spec.hostname, now.Unix())},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{spec.hostname},
	}

	for _, ip := range spec.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}

	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// memoryStore is a certificate.Store in memory that also lets callers wait for the first certificate.
type memoryStore struct {
	mu       sync.Mutex
	cert     *tls.Certificate
	certPEM  []byte
	keyPEM   []byte
	issued   chan struct{} // closed once the store holds a certificate
	isClosed bool
}

var _ certificate.Store = (*memoryStore)(nil)

func newMemoryStore() *memoryStore {
	return &memoryStore{issued: make(chan struct{})}
}

// Current returns the stored certificate, or certificate.NoCertKeyError when there is none.
func (s *memoryStore) Current() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	if s.cert == nil {
		noCert := certificate.NoCertKeyError("no certificate issued yet")

		return nil, &noCert
	}

	return s.cert, nil
}

// Update stores a newly issued certificate and key.
func (s *memoryStore) Update(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}

	if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
		return nil, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()

	s.cert, s.certPEM, s.keyPEM = &cert, certPEM, keyPEM

	if !s.isClosed {
		close(s.issued)
		s.isClosed = true
	}

	return &cert, nil
}

// pem returns the stored certificate and key as PEM.
func (s *memoryStore) pem() (certPEM, keyPEM []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.certPEM, s.keyPEM
}

// wait blocks until the store holds a certificate or ctx ends.
func (s *memoryStore) wait(ctx context.Context) error {
	select {
	case <-s.issued:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
