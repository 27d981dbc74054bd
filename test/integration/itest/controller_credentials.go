package itest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/controller/credentialrequest"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/test/talossim"
)

// CredentialRetention is how long the test's controller keeps answered requests.
const CredentialRetention = 3 * time.Second

// NewCredentialKey makes a requester's key pair: the private half, and the
// public half as a PEM "PUBLIC KEY" block.
func NewCredentialKey(t testing.TB) (ed25519.PrivateKey, string) {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// WaitAnswered waits for the request to be issued or denied.
func WaitAnswered(ctx context.Context, t *testing.T, ns, name, as string, groups ...string) *v1alpha1.TalosCredentialRequest {
	t.Helper()
	requests := APIClientFor(t, CP.ConfigFor(as, groups...)).IchorV1alpha1().TalosCredentialRequests(ns)
	var got *v1alpha1.TalosCredentialRequest
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err := requests.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = r
		return meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.CredentialRequestIssued) ||
			meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.CredentialRequestDenied), nil
	})
	if err != nil {
		t.Fatalf("TalosCredentialRequest %s not answered: %v (last seen %+v)", name, err, got)
	}
	return got
}

// CheckCredentialRequests asks for Talos credentials as an operator and an
// admin against the Ready cluster demo, uses an issued certificate on a node,
// and checks that answered requests are deleted after the retention.
func CheckCredentialRequests(ctx context.Context, t *testing.T, ns string, node *talossim.Node) {
	key, pubPEM := NewCredentialKey(t)
	operatorRequests := APIClientFor(t, CP.ConfigFor("olivia", "ichor:operator")).IchorV1alpha1().TalosCredentialRequests(ns)
	created, err := operatorRequests.Create(ctx, &v1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "olivia-reader"},
		Spec: v1alpha1.TalosCredentialRequestSpec{
			ClusterName: "demo", Purpose: v1alpha1.PurposeTalosconfigReader, PublicKey: pubPEM,
			Username: "root", Groups: []string{"system:masters"}, // claims the server must discard
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("operator creates a talosconfig-reader request: %v", err)
	}
	if created.Spec.Username != "olivia" || slices.Contains(created.Spec.Groups, "system:masters") {
		t.Fatalf("requester recorded as %q %v, want the authenticated olivia", created.Spec.Username, created.Spec.Groups)
	}

	issued := WaitAnswered(ctx, t, ns, "olivia-reader", "olivia", "ichor:operator")
	if !meta.IsStatusConditionTrue(issued.Status.Conditions, v1alpha1.CredentialRequestIssued) {
		t.Fatalf("request not issued: %+v", issued.Status.Conditions)
	}
	block, _ := pem.Decode([]byte(issued.Status.Certificate))
	if block == nil {
		t.Fatalf("status.certificate is not PEM: %q", issued.Status.Certificate)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cert.Subject.Organization, []string{string(role.Reader)}) || cert.Subject.CommonName != "olivia" || issued.Status.Role != string(role.Reader) {
		t.Errorf("certificate subject %v, status role %q; want O=[os:reader] CN=olivia", cert.Subject, issued.Status.Role)
	}
	// A reader talosconfig is for a person to use a while: an hour.
	if lifetime := cert.NotAfter.Sub(cert.NotBefore); lifetime > credentialrequest.MaxReaderTalosconfigLifetime || lifetime < 50*time.Minute {
		t.Errorf("talosconfig-reader certificate valid for %s, want an hour", lifetime)
	}
	if exp := issued.Status.ExpirationTimestamp; exp == nil || !exp.Time.Equal(cert.NotAfter) {
		t.Errorf("expirationTimestamp %v, certificate notAfter %v", exp, cert.NotAfter)
	}
	if !cert.PublicKey.(ed25519.PublicKey).Equal(key.Public()) {
		t.Error("the certificate is not for the requester's key")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(issued.Status.CABundle)) {
		t.Fatal("status.caBundle holds no certificate")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate does not chain to status.caBundle: %v", err)
	}

	// The certificate works on a node of the cluster, with os:reader's rights only.
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	session, err := talos.Machinery{}.Configured(ctx, node.Addr(), talos.Credentials{
		CA: []byte(issued.Status.CABundle), Certificate: []byte(issued.Status.Certificate),
		Key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close() //nolint:errcheck
	if st, err := session.Status(ctx); err != nil || !st.Running() {
		t.Errorf("reading the node's status as os:reader: %+v, %v", st, err)
	}
	if err := session.Bootstrap(ctx); status.Code(err) != codes.PermissionDenied {
		t.Errorf("bootstrap as os:reader = %v, want PermissionDenied", err)
	}

	// An etcd snapshot credential for a machine of another cluster is denied with the reason.
	_, pub2 := NewCredentialKey(t)
	admin := APIClientFor(t, CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosCredentialRequests(ns)
	if _, err := admin.Create(ctx, &v1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "carol-snapshot"},
		Spec: v1alpha1.TalosCredentialRequestSpec{
			ClusterName: "demo", Machines: []string{"rejected"}, Purpose: v1alpha1.PurposeEtcdSnapshot, PublicKey: pub2,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	denied := WaitAnswered(ctx, t, ns, "carol-snapshot", "carol", "ichor:admin")
	c := meta.FindStatusCondition(denied.Status.Conditions, v1alpha1.CredentialRequestDenied)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.CredentialRequestReasonMachineNotFound ||
		!strings.Contains(c.Message, "rejected") || denied.Status.Certificate != "" {
		t.Errorf("request for another cluster's machine: conditions %+v, certificate %q", denied.Status.Conditions, denied.Status.Certificate)
	}

	// A credential for one download lives ten minutes at most.
	if _, err := admin.Create(ctx, &v1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "carol-bundle"},
		Spec: v1alpha1.TalosCredentialRequestSpec{
			ClusterName: "demo", Machines: []string{"cp-1"}, Purpose: v1alpha1.PurposeSupportBundle, PublicKey: pub2,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bundle := WaitAnswered(ctx, t, ns, "carol-bundle", "carol", "ichor:admin")
	if block, _ := pem.Decode([]byte(bundle.Status.Certificate)); block == nil {
		t.Errorf("support-bundle request: conditions %+v, certificate %q", bundle.Status.Conditions, bundle.Status.Certificate)
	} else if cert, err := x509.ParseCertificate(block.Bytes); err != nil {
		t.Error(err)
	} else if lifetime := cert.NotAfter.Sub(cert.NotBefore); lifetime > credentialrequest.MaxLifetime || lifetime <= 0 ||
		!slices.Equal(cert.Subject.Organization, []string{string(role.Reader)}) || cert.Subject.CommonName != "carol" {
		t.Errorf("support-bundle certificate %v valid for %s, want O=[os:reader] CN=carol for at most %s", cert.Subject, lifetime, credentialrequest.MaxLifetime)
	}

	// A request for a cluster that does not exist is denied too.
	if _, err := operatorRequests.Create(ctx, &v1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "olivia-absent"},
		Spec:       v1alpha1.TalosCredentialRequestSpec{ClusterName: "absent", Purpose: v1alpha1.PurposeTalosconfigReader, PublicKey: pub2},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	absent := WaitAnswered(ctx, t, ns, "olivia-absent", "olivia", "ichor:operator")
	if c := meta.FindStatusCondition(absent.Status.Conditions, v1alpha1.CredentialRequestDenied); c == nil || c.Reason != v1alpha1.CredentialRequestReasonClusterNotFound {
		t.Errorf("request for an absent cluster: conditions %+v", absent.Status.Conditions)
	}

	// All are deleted once the retention is over.
	for _, name := range []string{"olivia-reader", "carol-snapshot", "carol-bundle", "olivia-absent"} {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, CredentialRetention+time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := admin.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("answered request %s was not deleted after %s: %v", name, CredentialRetention, err)
		}
	}
}
