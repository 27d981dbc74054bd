package credentialrequest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// The answers to TalosCredentialRequests against a fake client: a cluster
// "demo" with its secrets bundle, an approved machine and one not
// approved, and requests a test creates with a key of its own.

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

var (
	bundleOnce sync.Once
	bundleData []byte
	bundleErr  error
)

type fixture struct {
	t        *testing.T
	client   client.Client
	r        *Reconciler
	recorder *eventstest.Recorder
	clock    time.Time
	keys     map[string]ed25519.PublicKey
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	bundleOnce.Do(func() { bundleData, bundleErr = secretsbundle.Generate("v1.13.0", t0) })
	if bundleErr != nil {
		t.Fatal(bundleErr)
	}
	cluster := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"},
		Spec:       v1alpha1.TalosClusterSpec{TalosVersion: "v1.13.0", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"}},
		Status:     v1alpha1.TalosClusterStatus{SecretsDigest: secretsbundle.Digest(bundleData)},
	}
	machine := func(name, cluster string, approved bool) *v1alpha1.TalosMachine {
		m := &v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: v1alpha1.TalosMachineSpec{ClusterName: cluster}}
		if approved {
			m.Status.Approval = &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved, By: "olivia"}
		}
		return m
	}
	base := []client.Object{cluster,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretsbundle.SecretName(cluster), Namespace: "ns"},
			Data: map[string][]byte{secretsbundle.BundleKey: bundleData}},
		machine("cp-1", "demo", true), machine("new", "demo", false), machine("elsewhere", "other", true),
	}
	f := &fixture{t: t, recorder: eventstest.New(t, 100), clock: t0, keys: map[string]ed25519.PublicKey{}}
	f.client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(base, objs...)...).
		WithStatusSubresource(&v1alpha1.TalosCluster{}, &v1alpha1.TalosCredentialRequest{}).Build()
	f.r = &Reconciler{Client: f.client, Secrets: f.client, Recorder: f.recorder, Options: Options{Retention: time.Minute},
		Now: func() time.Time { return f.clock }}
	return f
}

// request creates a request by carol of the purpose, with a new key.
func (f *fixture) request(name string, purpose v1alpha1.CredentialPurpose, change ...func(*v1alpha1.TalosCredentialRequest)) {
	f.t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		f.t.Fatal(err)
	}
	f.keys[name] = pub
	cr := &v1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: v1alpha1.TalosCredentialRequestSpec{ClusterName: "demo", Purpose: purpose, Username: "carol",
			PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))},
	}
	for _, c := range change {
		c(cr)
	}
	if err := f.client.Create(context.Background(), cr); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) reconcile(name string) (ctrl.Result, *v1alpha1.TalosCredentialRequest) {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}})
	if err != nil {
		f.t.Fatalf("reconcile %s: %v", name, err)
	}
	var cr v1alpha1.TalosCredentialRequest
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, &cr); err != nil {
		f.t.Fatal(err)
	}
	return res, &cr
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// certificate parses a PEM certificate and checks that it certifies key
// and chains to the CA in caPEM.
func certificate(t *testing.T, certPEM, caPEM string, key ed25519.PublicKey) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode([]byte(certPEM))
	if block == nil {
		t.Fatalf("no PEM certificate in %q", certPEM)
	}
	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := crt.PublicKey.(ed25519.PublicKey); !ok || !got.Equal(key) {
		t.Errorf("the certificate is of another key")
	}
	if caPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caPEM)) {
			t.Fatalf("no CA in %q", caPEM)
		}
		if _, err := crt.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("the certificate does not chain to the CA it comes with: %v", err)
		}
	}
	return crt
}

// purposes are every purpose's Talos role and certificate lifetime, as the
// design gives them: the least role that does what the purpose is for.
var purposes = map[v1alpha1.CredentialPurpose]struct {
	role     string
	lifetime time.Duration
}{
	v1alpha1.PurposeTalosconfigReader: {"os:reader", time.Hour},
	v1alpha1.PurposeSupportBundle:     {"os:reader", 10 * time.Minute},
	v1alpha1.PurposeEtcdSnapshot:      {"os:etcd:backup", 10 * time.Minute},
	v1alpha1.PurposePacketCapture:     {"os:operator", 10 * time.Minute},
	v1alpha1.PurposeCredentials:       {"os:admin", time.Hour},
}

// TestEachPurposeGetsItsRole: every purpose is answered with a certificate
// of the requester's key, named for the requester, of exactly the
// purpose's Talos role and lifetime, from the cluster's Talos CA; only the
// new admin credentials come with a Kubernetes certificate (system:masters).
func TestEachPurposeGetsItsRole(t *testing.T) {
	for purpose := range ichor.CredentialPurposes {
		if _, ok := purposes[v1alpha1.CredentialPurpose(purpose)]; !ok {
			t.Errorf("purpose %s: no role and lifetime in this test", purpose)
		}
	}
	for purpose, want := range purposes {
		t.Run(string(purpose), func(t *testing.T) {
			f := newFixture(t)
			if purpose == v1alpha1.PurposeCredentials {
				f.rotated()
			}
			f.request("req", purpose, func(cr *v1alpha1.TalosCredentialRequest) { cr.Spec.Machines = []string{"cp-1"} })
			res, cr := f.reconcile("req")
			c := meta.FindStatusCondition(cr.Status.Conditions, v1alpha1.CredentialRequestIssued)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.CredentialRequestReasonIssued ||
				!strings.Contains(c.Message, fmt.Sprintf("issued a %s certificate for %s to carol", want.role, purpose)) {
				t.Fatalf("conditions %+v", cr.Status.Conditions)
			}
			if res.RequeueAfter != time.Minute {
				t.Errorf("result %+v, want a look again after the retention", res)
			}
			crt := certificate(t, cr.Status.Certificate, cr.Status.CABundle, f.keys["req"])
			if !slices.Equal(crt.Subject.Organization, []string{want.role}) || crt.Subject.CommonName != "carol" || cr.Status.Role != want.role {
				t.Errorf("certificate of %v for %s, role %s; want %s", crt.Subject.Organization, crt.Subject.CommonName, cr.Status.Role, want.role)
			}
			if got := crt.NotAfter.Sub(crt.NotBefore); got != want.lifetime {
				t.Errorf("valid for %s, want %s", got, want.lifetime)
			}
			if cr.Status.ExpirationTimestamp == nil || !cr.Status.ExpirationTimestamp.Time.Equal(crt.NotAfter) {
				t.Errorf("expiration %v, certificate's %v", cr.Status.ExpirationTimestamp, crt.NotAfter)
			}
			if purpose != v1alpha1.PurposeCredentials {
				if cr.Status.KubernetesCertificate != "" {
					t.Error("a Kubernetes certificate besides")
				}
			} else {
				kube := certificate(t, cr.Status.KubernetesCertificate, "", f.keys["req"])
				if !slices.Equal(kube.Subject.Organization, []string{"system:masters"}) || kube.Subject.CommonName != "carol" ||
					!kube.NotAfter.Equal(t0.Add(time.Hour)) {
					t.Errorf("Kubernetes certificate of %v for %s until %s", kube.Subject.Organization, kube.Subject.CommonName, kube.NotAfter)
				}
			}
			if ev := f.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal Issued issued a "+want.role) {
				t.Errorf("events %v", ev)
			}
		})
	}
}

// rotated records a completed CA rotation's new admin credentials on the
// cluster, not served yet.
func (f *fixture) rotated() {
	f.t.Helper()
	var c v1alpha1.TalosCluster
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "demo"}, &c); err != nil {
		f.t.Fatal(err)
	}
	c.Status.Credentials = &v1alpha1.ClusterCredentialsStatus{Rotation: "rotate", RotatedAt: metav1.NewTime(t0.Add(-time.Hour))}
	if err := f.client.Status().Update(context.Background(), &c); err != nil {
		f.t.Fatal(err)
	}
}

// TestLifetimesFollowTheInstallation: the installation's lifetimes are
// used below the purposes' caps, never above; the new admin credentials'
// lifetime is their own.
func TestLifetimesFollowTheInstallation(t *testing.T) {
	for _, tc := range []struct {
		name            string
		talos, reader   time.Duration
		wantTalos       time.Duration
		wantReader      time.Duration
		wantCredentials time.Duration
	}{
		{"shorter", 5 * time.Minute, 30 * time.Minute, 5 * time.Minute, 30 * time.Minute, time.Hour},
		{"longer than the caps", 2 * time.Hour, 3 * time.Hour, 10 * time.Minute, time.Hour, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &v1alpha1.IchorInstallation{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.InstallationName},
				Spec: v1alpha1.IchorInstallationSpec{Settings: v1alpha1.InstallationSettings{CredentialLifetimes: v1alpha1.CredentialLifetimes{
					TalosCredential: &metav1.Duration{Duration: tc.talos}, ReaderTalosconfig: &metav1.Duration{Duration: tc.reader}}}}})
			f.rotated()
			for purpose, want := range map[v1alpha1.CredentialPurpose]time.Duration{
				v1alpha1.PurposeSupportBundle: tc.wantTalos, v1alpha1.PurposeEtcdSnapshot: tc.wantTalos,
				v1alpha1.PurposeTalosconfigReader: tc.wantReader, v1alpha1.PurposeCredentials: tc.wantCredentials,
			} {
				name := string(purpose)
				f.request(name, purpose)
				_, cr := f.reconcile(name)
				if cr.Status.Certificate == "" {
					t.Fatalf("%s: not issued: %+v", purpose, cr.Status.Conditions)
				}
				crt := certificate(t, cr.Status.Certificate, cr.Status.CABundle, f.keys[name])
				if got := crt.NotAfter.Sub(crt.NotBefore); got != want {
					t.Errorf("%s: valid for %s, want %s", purpose, got, want)
				}
			}
		})
	}
}

// TestNewAdminCredentialsOnce: the new admin credentials of a CA rotation
// go to the first request, which the cluster records; a second request is
// denied saying who took them and when; none are handed out before a
// rotation completed.
func TestNewAdminCredentialsOnce(t *testing.T) {
	f := newFixture(t)
	f.request("before", v1alpha1.PurposeCredentials)
	_, cr := f.reconcile("before")
	if c := meta.FindStatusCondition(cr.Status.Conditions, v1alpha1.CredentialRequestDenied); c == nil || c.Reason != v1alpha1.CredentialRequestReasonNoNewCredentials ||
		!strings.Contains(c.Message, "no CA rotation of TalosCluster demo has completed") || cr.Status.Certificate != "" {
		t.Fatalf("before a rotation: %+v", cr.Status.Conditions)
	}

	f.rotated()
	f.clock = t0.Add(time.Minute)
	f.request("first", v1alpha1.PurposeCredentials)
	if _, cr := f.reconcile("first"); cr.Status.Certificate == "" || cr.Status.KubernetesCertificate == "" {
		t.Fatalf("the first request: %+v", cr.Status.Conditions)
	}
	var c v1alpha1.TalosCluster
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "demo"}, &c); err != nil {
		t.Fatal(err)
	}
	if cs := c.Status.Credentials; cs.ServedTo != "carol" || cs.Request != "first" || cs.ServedAt == nil || !cs.ServedAt.Time.Equal(t0.Add(time.Minute)) {
		t.Fatalf("the cluster's record: %+v", cs)
	}

	f.request("second", v1alpha1.PurposeCredentials, func(cr *v1alpha1.TalosCredentialRequest) { cr.Spec.Username = "dave" })
	_, cr = f.reconcile("second")
	d := meta.FindStatusCondition(cr.Status.Conditions, v1alpha1.CredentialRequestDenied)
	if d == nil || d.Reason != v1alpha1.CredentialRequestReasonAlreadyServed ||
		!strings.Contains(d.Message, "the new admin credentials of TalosOperation rotate") || !strings.Contains(d.Message, "were downloaded by carol at 2026-12-04T12:01:00Z; they are served once") ||
		cr.Status.Certificate != "" || cr.Status.KubernetesCertificate != "" || meta.FindStatusCondition(cr.Status.Conditions, v1alpha1.CredentialRequestIssued) != nil {
		t.Fatalf("the second request: %+v, certificate issued %v", cr.Status.Conditions, cr.Status.Certificate != "")
	}
	if ev := f.events(); !slices.ContainsFunc(ev, func(e string) bool { return strings.HasPrefix(e, "Warning AlreadyServed ") }) {
		t.Errorf("events %v", ev)
	}
}

// TestRefusals: a request the controller cannot answer with a certificate
// is denied, saying why, with none; one whose cluster's secrets are not
// ready waits for them, unanswered.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.TalosCredentialRequest)
		reason string
		want   string
	}{
		{"an unknown purpose", func(cr *v1alpha1.TalosCredentialRequest) { cr.Spec.Purpose = "root-shell" },
			v1alpha1.CredentialRequestReasonUnknownPurpose, `purpose "root-shell" grants no Talos role`},
		{"no requester", func(cr *v1alpha1.TalosCredentialRequest) { cr.Spec.Username = "" },
			v1alpha1.CredentialRequestReasonNoRequester, "the request names no authenticated requester"},
		{"a key that is no PEM public key", func(cr *v1alpha1.TalosCredentialRequest) { cr.Spec.PublicKey = "ssh-ed25519 AAAA" },
			v1alpha1.CredentialRequestReasonBadPublicKey, "publicKey is not a PEM PUBLIC KEY block"},
		{"no such cluster", func(cr *v1alpha1.TalosCredentialRequest) { cr.Spec.ClusterName = "gone" },
			v1alpha1.CredentialRequestReasonClusterNotFound, "TalosCluster ns/gone does not exist"},
		{"a machine not approved", func(cr *v1alpha1.TalosCredentialRequest) { cr.Spec.Machines = []string{"cp-1", "new"} },
			v1alpha1.CredentialRequestReasonMachineNotFound, "TalosMachine new is not an approved machine of TalosCluster demo"},
		{"a machine of another cluster", func(cr *v1alpha1.TalosCredentialRequest) { cr.Spec.Machines = []string{"elsewhere"} },
			v1alpha1.CredentialRequestReasonMachineNotFound, "TalosMachine elsewhere is not an approved machine of TalosCluster demo"},
		{"no such machine", func(cr *v1alpha1.TalosCredentialRequest) { cr.Spec.Machines = []string{"nope"} },
			v1alpha1.CredentialRequestReasonMachineNotFound, "TalosMachine nope is not an approved machine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.request("req", v1alpha1.PurposeSupportBundle, tc.change)
			_, cr := f.reconcile("req")
			d := meta.FindStatusCondition(cr.Status.Conditions, v1alpha1.CredentialRequestDenied)
			if d == nil || d.Status != metav1.ConditionTrue || d.Reason != tc.reason || !strings.Contains(d.Message, tc.want) {
				t.Fatalf("conditions %+v, want Denied %s saying %q", cr.Status.Conditions, tc.reason, tc.want)
			}
			if cr.Status.Certificate != "" || cr.Status.Role != "" || cr.Status.ExpirationTimestamp != nil ||
				meta.FindStatusCondition(cr.Status.Conditions, v1alpha1.CredentialRequestIssued) != nil {
				t.Errorf("a denied request holds %+v", cr.Status)
			}
			if ev := f.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+tc.reason+" ") {
				t.Errorf("events %v", ev)
			}
		})
	}

	t.Run("secrets not ready", func(t *testing.T) {
		f := newFixture(t)
		if err := f.client.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns",
			Name: secretsbundle.SecretName(&v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo"}})}}); err != nil {
			t.Fatal(err)
		}
		f.request("req", v1alpha1.PurposeSupportBundle)
		res, cr := f.reconcile("req")
		if res.RequeueAfter != retryInterval || len(cr.Status.Conditions) != 0 || cr.Status.Certificate != "" {
			t.Errorf("result %+v, status %+v", res, cr.Status)
		}
	})
}

// TestAnsweredRequestsGo: an answered request is deleted once its
// retention is over, not before, and is not answered again meanwhile.
func TestAnsweredRequestsGo(t *testing.T) {
	f := newFixture(t)
	f.request("req", v1alpha1.PurposeEtcdSnapshot)
	_, first := f.reconcile("req")
	f.clock = t0.Add(30 * time.Second)
	res, cr := f.reconcile("req")
	if res.RequeueAfter != 30*time.Second || cr.Status.Certificate != first.Status.Certificate {
		t.Errorf("half-way through the retention: result %+v, answered again: %v", res, cr.Status.Certificate != first.Status.Certificate)
	}
	f.clock = t0.Add(time.Minute)
	if _, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "req"}}); err != nil {
		t.Fatal(err)
	}
	var gone v1alpha1.TalosCredentialRequest
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "req"}, &gone); err == nil {
		t.Errorf("the request stays after its retention: %+v", gone.Status.Conditions)
	}
}
