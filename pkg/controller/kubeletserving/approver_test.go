package kubeletserving

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/kubeletserving"
	"ichor.dev/ichor/pkg/talos"
)

// identityDialer is a talos.Dialer whose nodes answer Identity only: a node
// is its address's entry; a node without one, or whose gate is closed,
// does not answer (until the test opens the gate).
type identityDialer struct {
	mu    sync.Mutex
	nodes map[string]*talos.Identity
	// gates hold a node's answer until closed.
	gates map[string]chan struct{}
	// calls count identity reads; dials and closes sessions, by address.
	calls, dials, closes map[string]int
}

func (d *identityDialer) Maintenance(context.Context, string, talos.Pin) (talos.Node, error) {
	panic("identityDialer: maintenance sessions are not faked")
}

func (d *identityDialer) Configured(_ context.Context, address string, creds talos.Credentials) (talos.Node, error) {
	if len(creds.Certificate) == 0 {
		return nil, errors.New("no client certificate")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials[address]++
	return &identitySession{d: d, address: address}, nil
}

type identitySession struct {
	talos.Node
	d       *identityDialer
	address string
}

func (s *identitySession) Identity(ctx context.Context) (*talos.Identity, error) {
	s.d.mu.Lock()
	s.d.calls[s.address]++
	gate := s.d.gates[s.address]
	s.d.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	id, ok := s.d.nodes[s.address]
	if !ok {
		return nil, fmt.Errorf("dial %s: connection refused", s.address)
	}
	return id, nil
}

func (s *identitySession) Close() error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.closes[s.address]++
	return nil
}

// count is one of the dialer's counts for address.
func (d *identityDialer) count(counts map[string]int, address string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return counts[address]
}

func (d *identityDialer) set(address string, id *talos.Identity) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nodes[address] = id
}

func nodeIdentity(name, ip string) *talos.Identity {
	return &talos.Identity{Nodename: name, Hostname: name, KubeletAddresses: []netip.Addr{netip.MustParseAddr(ip)}}
}

// servingRequest is the kubelet serving request of node asking for ip, as
// the kubelet makes it.
func servingRequest(t *testing.T, name, node, ip string) *certv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		DNSNames:    []string{node},
		IPAddresses: []net.IP{net.ParseIP(ip)},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: kubeletserving.Signer,
			Username:   "system:node:" + node,
			Groups:     []string{"system:nodes", "system:authenticated"},
			Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
		},
	}
}

func machine(name, address string) v1alpha1.TalosMachine {
	m := v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
	m.Spec.Address = address
	m.Status.NodeName = name
	return m
}

type approverTest struct {
	t      *testing.T
	ctx    context.Context
	cs     *fake.Clientset
	dialer *identityDialer
	a      *approver
	wakes  chan struct{}
}

// newApproverTest starts an approver on a fake Kubernetes API with
// credentials and machines handed over once, as one reconcile does; no
// reconcile runs after that.
func newApproverTest(t *testing.T, machines ...v1alpha1.TalosMachine) *approverTest {
	t.Helper()
	at := &approverTest{
		t: t, ctx: t.Context(), cs: fake.NewClientset(),
		dialer: &identityDialer{nodes: map[string]*talos.Identity{}, gates: map[string]chan struct{}{},
			calls: map[string]int{}, dials: map[string]int{}, closes: map[string]int{}},
		wakes: make(chan struct{}, 1),
	}
	r := &Reconciler{Dialer: at.dialer, Recorder: eventstest.New(t, 1000), Now: time.Now,
		Options: Options{RetryInterval: 50 * time.Millisecond, PollInterval: time.Hour, ResyncInterval: time.Hour, Parallelism: 4}.withDefaults()}
	a, err := startApprover(r, types.NamespacedName{Namespace: "ns", Name: "demo"}, at.cs, func() {
		select {
		case at.wakes <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.stop)
	at.a = a
	if err := a.setCredentials([]byte("talos CA"), time.Now(), func() (talos.Credentials, error) {
		return talos.Credentials{CA: []byte("talos CA"), Certificate: []byte("cert"), Key: []byte("key")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	a.setMachines(machines)
	return at
}

func (at *approverTest) create(csr *certv1.CertificateSigningRequest) {
	at.t.Helper()
	if _, err := at.cs.CertificatesV1().CertificateSigningRequests().Create(at.ctx, csr, metav1.CreateOptions{}); err != nil {
		at.t.Fatal(err)
	}
}

// condition is the Approved or Denied condition of request name, once it
// has one (nil until then).
func (at *approverTest) condition(name string) *certv1.CertificateSigningRequestCondition {
	at.t.Helper()
	csr, err := at.cs.CertificatesV1().CertificateSigningRequests().Get(at.ctx, name, metav1.GetOptions{})
	if err != nil {
		at.t.Fatal(err)
	}
	for i := range csr.Status.Conditions {
		if c := &csr.Status.Conditions[i]; c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func (at *approverTest) waitDecided(name string, want certv1.RequestConditionType, reason string) {
	at.t.Helper()
	var got *certv1.CertificateSigningRequestCondition
	err := wait.PollUntilContextTimeout(at.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got = at.condition(name)
		return got != nil, nil
	})
	if err != nil {
		at.t.Fatalf("request %s was not decided: %v", name, err)
	}
	if got.Type != want || got.Reason != reason {
		at.t.Fatalf("request %s: %s %s (%s), want %s %s", name, got.Type, got.Reason, got.Message, want, reason)
	}
}

// TestApproverDecidesEachRequestOnArrival: with the approver's view handed
// over once, requests are decided as they arrive, without a reconcile: a
// good one approved, one over-asking denied with the reason, another
// signer's untouched.
func TestApproverDecidesEachRequestOnArrival(t *testing.T) {
	at := newApproverTest(t, machine("worker-1", "10.5.0.11:50000"))
	at.dialer.set("10.5.0.11:50000", nodeIdentity("worker-1", "10.5.0.11"))
	at.create(servingRequest(t, "good", "worker-1", "10.5.0.11"))
	at.waitDecided("good", certv1.CertificateApproved, kubeletserving.ReasonApproved)
	at.create(servingRequest(t, "foreign-ip", "worker-1", "10.5.0.12"))
	at.waitDecided("foreign-ip", certv1.CertificateDenied, kubeletserving.ReasonUnknownIPAddress)

	other := servingRequest(t, "other-signer", "worker-1", "10.5.0.11")
	other.Spec.SignerName = certv1.KubeAPIServerClientKubeletSignerName
	at.create(other)
	last := servingRequest(t, "last", "worker-1", "10.5.0.11")
	at.create(last)
	at.waitDecided("last", certv1.CertificateApproved, kubeletserving.ReasonApproved)
	if c := at.condition("other-signer"); c != nil {
		t.Errorf("another signer's request was decided: %+v", c)
	}
}

// TestApproverRequestsDoNotWaitForEachOther: a node whose Talos API hangs
// holds up its own request only; the others are decided meanwhile, and
// the held one once its node answers, all without a reconcile.
func TestApproverRequestsDoNotWaitForEachOther(t *testing.T) {
	machines := []v1alpha1.TalosMachine{machine("slow", "10.5.0.2:50000")}
	for i := range 40 {
		machines = append(machines, machine(fmt.Sprintf("worker-%d", i), fmt.Sprintf("10.5.1.%d:50000", i)))
	}
	at := newApproverTest(t, machines...)
	gate := make(chan struct{})
	at.dialer.gates["10.5.0.2:50000"] = gate
	at.dialer.set("10.5.0.2:50000", nodeIdentity("slow", "10.5.0.2"))
	at.create(servingRequest(t, "slow-1", "slow", "10.5.0.2"))
	for i := range 40 {
		at.dialer.set(fmt.Sprintf("10.5.1.%d:50000", i), nodeIdentity(fmt.Sprintf("worker-%d", i), fmt.Sprintf("10.5.1.%d", i)))
		at.create(servingRequest(t, fmt.Sprintf("req-%d", i), fmt.Sprintf("worker-%d", i), fmt.Sprintf("10.5.1.%d", i)))
	}
	for i := range 40 {
		at.waitDecided(fmt.Sprintf("req-%d", i), certv1.CertificateApproved, kubeletserving.ReasonApproved)
	}
	if c := at.condition("slow-1"); c != nil {
		t.Fatalf("the request of a node that has not answered was decided: %+v", c)
	}
	close(gate)
	at.waitDecided("slow-1", certv1.CertificateApproved, kubeletserving.ReasonApproved)
}

// TestApproverFailsClosed: a request whose node does not answer stays
// pending and is tried again until it answers; one for a node of no
// machine stays pending (never denied) until a machine names that node.
func TestApproverFailsClosed(t *testing.T) {
	at := newApproverTest(t, machine("worker-1", "10.5.0.11:50000"))
	at.create(servingRequest(t, "unreachable", "worker-1", "10.5.0.11"))
	at.create(servingRequest(t, "unknown", "worker-9", "10.5.0.19"))
	if err := wait.PollUntilContextTimeout(at.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		at.dialer.mu.Lock()
		defer at.dialer.mu.Unlock()
		return at.dialer.calls["10.5.0.11:50000"] >= 3, nil
	}); err != nil {
		t.Fatalf("the unreachable node was not asked again: %v", err)
	}
	for _, name := range []string{"unreachable", "unknown"} {
		if c := at.condition(name); c != nil {
			t.Fatalf("request %s was decided: %+v", name, c)
		}
	}
	at.dialer.set("10.5.0.11:50000", nodeIdentity("worker-1", "10.5.0.11"))
	at.waitDecided("unreachable", certv1.CertificateApproved, kubeletserving.ReasonApproved)

	at.dialer.set("10.5.0.19:50000", nodeIdentity("worker-9", "10.5.0.19"))
	at.a.setMachines([]v1alpha1.TalosMachine{machine("worker-1", "10.5.0.11:50000"), machine("worker-9", "10.5.0.19:50000")})
	at.waitDecided("unknown", certv1.CertificateApproved, kubeletserving.ReasonApproved)
}

// TestApproverKeepsASessionPerMachine: requests of a node are decided over
// one session with it, opened before they came; a session whose read fails
// is closed and the next attempt opens another; renewed credentials open
// every session again and close the old one; a machine that leaves has its
// session closed.
func TestApproverKeepsASessionPerMachine(t *testing.T) {
	const addr = "10.5.0.11:50000"
	at := newApproverTest(t, machine("worker-1", addr))
	at.dialer.set(addr, nodeIdentity("worker-1", "10.5.0.11"))
	at.waitCount("reads over the session opened ahead", at.dialer.calls, addr, 1)
	for i := range 5 {
		name := fmt.Sprintf("req-%d", i)
		at.create(servingRequest(t, name, "worker-1", "10.5.0.11"))
		at.waitDecided(name, certv1.CertificateApproved, kubeletserving.ReasonApproved)
	}
	if dials := at.dialer.count(at.dialer.dials, addr); dials != 1 {
		t.Fatalf("%d sessions opened for five requests of one node, want 1", dials)
	}

	// The node stops answering: each attempt opens a session and closes it.
	at.dialer.mu.Lock()
	delete(at.dialer.nodes, addr)
	at.dialer.mu.Unlock()
	at.create(servingRequest(t, "while-down", "worker-1", "10.5.0.11"))
	at.waitCount("sessions closed after failed reads", at.dialer.closes, addr, 3)
	if c := at.condition("while-down"); c != nil {
		t.Fatalf("a request was decided while its node did not answer: %+v", c)
	}
	at.dialer.set(addr, nodeIdentity("worker-1", "10.5.0.11"))
	at.waitDecided("while-down", certv1.CertificateApproved, kubeletserving.ReasonApproved)

	// Renewed credentials: a session is opened with them, the old one closed.
	dials, closes := at.dialer.count(at.dialer.dials, addr), at.dialer.count(at.dialer.closes, addr)
	if err := at.a.setCredentials([]byte("talos CA"), time.Now().Add(credentialTTL), func() (talos.Credentials, error) {
		return talos.Credentials{CA: []byte("talos CA"), Certificate: []byte("cert 2"), Key: []byte("key 2")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	at.waitCount("sessions opened after renewal", at.dialer.dials, addr, dials+1)
	at.waitCount("sessions closed after renewal", at.dialer.closes, addr, closes+1)

	at.a.setMachines(nil)
	at.waitCount("sessions closed after the machine left", at.dialer.closes, addr, closes+2)
}

// waitCount waits until the dialer's count for address reaches want.
func (at *approverTest) waitCount(what string, counts map[string]int, address string, want int) {
	at.t.Helper()
	var got int
	err := wait.PollUntilContextTimeout(at.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got = at.dialer.count(counts, address)
		return got >= want, nil
	})
	if err != nil {
		at.t.Fatalf("%s: %d, want %d", what, got, want)
	}
}

// TestApproverKeepsTheNewestIssuedCertificate: the certificates
// kube-controller-manager issues are read once each, and the newest per
// node is kept for the reconcile to record.
func TestApproverKeepsTheNewestIssuedCertificate(t *testing.T) {
	at := newApproverTest(t, machine("worker-1", "10.5.0.11:50000"))
	at.dialer.set("10.5.0.11:50000", nodeIdentity("worker-1", "10.5.0.11"))
	issue := func(name string, notAfter time.Time) {
		at.create(servingRequest(t, name, "worker-1", "10.5.0.11"))
		at.waitDecided(name, certv1.CertificateApproved, kubeletserving.ReasonApproved)
		csr, err := at.cs.CertificatesV1().CertificateSigningRequests().Get(at.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		csr.Status.Certificate = selfSigned(t, notAfter)
		if _, err := at.cs.CertificatesV1().CertificateSigningRequests().UpdateStatus(at.ctx, csr, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	issue("newer", later)
	issue("older", later.Add(-time.Hour))
	err := wait.PollUntilContextTimeout(at.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		at.a.mu.Lock()
		defer at.a.mu.Unlock()
		return at.a.parsed["newer"] && at.a.parsed["older"], nil
	})
	if err != nil {
		t.Fatalf("the issued certificates were not read: %v", err)
	}
	rec := at.a.issuedCertificates()["worker-1"]
	if rec == nil || rec.Request != "newer" || !rec.NotAfter.Time.Equal(later) {
		t.Fatalf("worker-1's record %+v, want request newer until %v", rec, later)
	}
}

// selfSigned is a certificate valid until notAfter, standing in for one
// kube-controller-manager issues.
func selfSigned(t *testing.T, notAfter time.Time) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "system:node:worker-1"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: notAfter,
	}, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}}, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestApproverRecordsWaitForRequests: while requests are being decided or
// wait for a worker, and for recordDelay after the last one arrived or was
// decided, the reconcile's records are put off, for at most
// maxRecordDelay; once that quiet time passed, they are due again.
func TestApproverRecordsWaitForRequests(t *testing.T) {
	const addr = "10.5.0.11:50000"
	at := newApproverTest(t, machine("worker-1", addr))
	gate := make(chan struct{})
	at.dialer.mu.Lock()
	at.dialer.gates[addr] = gate
	at.dialer.mu.Unlock()
	at.dialer.set(addr, nodeIdentity("worker-1", "10.5.0.11"))
	held := func(deciding int32, queued int) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(at.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return at.a.deciding.Load() == deciding && at.a.queue.Len() == queued, nil
		}); err != nil {
			t.Fatalf("want %d requests being decided and %d queued; have %d and %d", deciding, queued, at.a.deciding.Load(), at.a.queue.Len())
		}
	}
	// The approver's four workers, held by the node.
	for i := range 4 {
		at.create(servingRequest(t, fmt.Sprintf("req-%d", i), "worker-1", "10.5.0.11"))
	}
	held(4, 0)
	now := time.Now()
	if at.a.recordDue(now) {
		t.Fatal("records are due while requests are being decided")
	}
	for i := 4; i < 8; i++ {
		at.create(servingRequest(t, fmt.Sprintf("req-%d", i), "worker-1", "10.5.0.11"))
	}
	held(4, 4)
	if at.a.recordDue(now.Add(maxRecordDelay - time.Second)) {
		t.Fatal("records are due before they waited maxRecordDelay")
	}
	if !at.a.recordDue(now.Add(maxRecordDelay)) {
		t.Fatal("records are not due after waiting maxRecordDelay")
	}
	close(gate)
	for i := range 8 {
		at.waitDecided(fmt.Sprintf("req-%d", i), certv1.CertificateApproved, kubeletserving.ReasonApproved)
	}
	held(0, 0)
	lastDecided := time.Unix(0, at.a.lastBusy.Load())
	if at.a.recordDue(lastDecided.Add(recordDelay / 2)) {
		t.Fatal("records are due before a quiet recordDelay after the last decision")
	}
	if !at.a.recordDue(lastDecided.Add(recordDelay)) {
		t.Fatal("records are not due a quiet recordDelay after the last decision")
	}
}

// TestSessionsKeepNoneAfterStop: a read that comes after the approver
// stopped (a decision in flight) opens a session and closes it again.
func TestSessionsKeepNoneAfterStop(t *testing.T) {
	const addr = "10.5.0.11:50000"
	d := &identityDialer{nodes: map[string]*talos.Identity{}, gates: map[string]chan struct{}{},
		calls: map[string]int{}, dials: map[string]int{}, closes: map[string]int{}}
	d.set(addr, nodeIdentity("worker-1", "10.5.0.11"))
	s := newSessions(d, 5*time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	s.setCredentials(talos.Credentials{CA: []byte("ca"), Certificate: []byte("cert"), Key: []byte("key")})
	s.setAddresses([]string{addr})
	cancel()
	<-done
	if _, err := s.identity(t.Context(), addr); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return d.count(d.closes, addr) == d.count(d.dials, addr), nil
	}); err != nil {
		t.Fatalf("%d sessions opened, %d closed after the stop", d.count(d.dials, addr), d.count(d.closes, addr))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.open) != 0 {
		t.Errorf("%d sessions kept after the stop", len(s.open))
	}
}
