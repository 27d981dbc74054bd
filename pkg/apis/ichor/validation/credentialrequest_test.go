package validation

import (
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// testKeys are generated once: RSA generation is slow, more so under -race.
var testKeys = sync.OnceValue(func() map[string]crypto.PublicKey {
	keys := map[string]crypto.PublicKey{}
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	must(err)
	keys["ed25519"] = edPub
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	keys["ecdsa-p256"] = &ec.PublicKey
	rsa2048, err := rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	keys["rsa-2048"] = &rsa2048.PublicKey
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	must(err)
	keys["rsa-1024"] = &rsa1024.PublicKey
	x, err := ecdh.X25519().GenerateKey(rand.Reader)
	must(err)
	keys["x25519"] = x.PublicKey()
	return keys
})

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// publicKeyPEM encodes one of testKeys as a PEM PUBLIC KEY block.
func publicKeyPEM(name string) string {
	der, err := x509.MarshalPKIXPublicKey(testKeys()[name])
	must(err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// selfSignedPEM is a small Ed25519 certificate for status checks.
func selfSignedPEM() string {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	must(err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "alice", Organization: []string{"os:reader"}},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(10 * time.Minute),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	must(err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// validCredentialRequest is an internal TalosCredentialRequest as the server
// sees it after filling in the requester (the kind has no defaults).
func validCredentialRequest() *ichor.TalosCredentialRequest {
	return &ichor.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-x8f2k", Namespace: "team-a", ResourceVersion: "1"},
		Spec: ichor.TalosCredentialRequestSpec{
			ClusterName: "prod",
			Purpose:     ichor.PurposeTalosconfigReader,
			PublicKey:   publicKeyPEM("ed25519"),
			Username:    "alice",
			UID:         "8d7c2a51",
			Groups:      []string{"system:authenticated"},
		},
	}
}

func TestValidateTalosCredentialRequest(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *ichor.TalosCredentialRequestSpec)
		want   []fe
	}{
		{name: "valid with an Ed25519 key", mutate: func(s *ichor.TalosCredentialRequestSpec) {}},
		{
			name:   "valid with an ECDSA key",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.PublicKey = publicKeyPEM("ecdsa-p256") },
		},
		{
			name:   "valid with an RSA 2048 key",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.PublicKey = publicKeyPEM("rsa-2048") },
		},
		{
			name:   "valid with trailing whitespace after the key",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.PublicKey += "\n\n  \t\r\n" },
		},
		{
			name: "valid for some machines and every purpose",
			mutate: func(s *ichor.TalosCredentialRequestSpec) {
				s.Machines = []string{"cp-1", "cp-2"}
				s.Purpose = ichor.PurposePacketCapture
			},
		},
		{
			name:   "RSA 1024 key",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.PublicKey = publicKeyPEM("rsa-1024") },
			want:   []fe{invalid("spec.publicKey")},
		},
		{
			name:   "X25519 key",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.PublicKey = publicKeyPEM("x25519") },
			want:   []fe{invalid("spec.publicKey")},
		},
		{
			name:   "public key missing",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.PublicKey = "" },
			want:   []fe{required("spec.publicKey")},
		},
		{
			name:   "public key not PEM",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.PublicKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI alice" },
			want:   []fe{invalid("spec.publicKey")},
		},
		{
			name: "PKCS#1 RSA PUBLIC KEY block",
			mutate: func(s *ichor.TalosCredentialRequestSpec) {
				der := x509.MarshalPKCS1PublicKey(testKeys()["rsa-2048"].(*rsa.PublicKey))
				s.PublicKey = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: der}))
			},
			want: []fe{invalid("spec.publicKey")},
		},
		{
			name: "PUBLIC KEY block that is not PKIX",
			mutate: func(s *ichor.TalosCredentialRequestSpec) {
				s.PublicKey = string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("garbage")}))
			},
			want: []fe{invalid("spec.publicKey")},
		},
		{
			name:   "two PEM blocks",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.PublicKey += publicKeyPEM("ecdsa-p256") },
			want:   []fe{invalid("spec.publicKey")},
		},
		{
			name:   "a certificate instead of a key",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.PublicKey = selfSignedPEM() },
			want:   []fe{invalid("spec.publicKey")},
		},
		{
			name:   "cluster name missing",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.ClusterName = "" },
			want:   []fe{required("spec.clusterName")},
		},
		{
			name:   "machines repeated",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.Machines = []string{"cp-1", "cp-1"} },
			want:   []fe{duplicate("spec.machines[1]")},
		},
		{
			name:   "purpose missing",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.Purpose = "" },
			want:   []fe{required("spec.purpose")},
		},
		{
			name:   "unknown purpose",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.Purpose = "os:admin" },
			want:   []fe{notSupported("spec.purpose")},
		},
		{
			name:   "no requester",
			mutate: func(s *ichor.TalosCredentialRequestSpec) { s.Username = "" },
			want:   []fe{required("spec.username")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := validCredentialRequest()
			tc.mutate(&r.Spec)
			expectErrors(t, ValidateTalosCredentialRequest(r), tc.want...)
		})
	}
}

func TestValidateTalosCredentialRequestPublicKeyMessages(t *testing.T) {
	r := validCredentialRequest()
	r.Spec.PublicKey = publicKeyPEM("rsa-1024")
	errs := ValidateTalosCredentialRequest(r)
	if len(errs) != 1 || !strings.Contains(errs[0].Detail, "2048") {
		t.Errorf("want one error naming the 2048-bit minimum, got %v", errs)
	}
	if len(errs) == 1 && strings.Contains(errs[0].Error(), "BEGIN PUBLIC KEY") {
		t.Errorf("the key itself should not be echoed back: %v", errs[0])
	}
}

func TestValidateTalosCredentialRequestUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(r *ichor.TalosCredentialRequest)
		want   []fe
	}{
		{name: "unchanged", mutate: func(r *ichor.TalosCredentialRequest) {}},
		{
			name:   "finalizers may change",
			mutate: func(r *ichor.TalosCredentialRequest) { r.Finalizers = []string{"ichor.dev/audit"} },
		},
		{
			name:   "purpose changed",
			mutate: func(r *ichor.TalosCredentialRequest) { r.Spec.Purpose = ichor.PurposeEtcdSnapshot },
			want:   []fe{invalid("spec")},
		},
		{
			name:   "key changed",
			mutate: func(r *ichor.TalosCredentialRequest) { r.Spec.PublicKey = publicKeyPEM("ecdsa-p256") },
			want:   []fe{invalid("spec")},
		},
		{
			name:   "requester changed",
			mutate: func(r *ichor.TalosCredentialRequest) { r.Spec.Username = "mallory" },
			want:   []fe{invalid("spec")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validCredentialRequest()
			r := old.DeepCopy()
			tc.mutate(r)
			expectErrors(t, ValidateTalosCredentialRequestUpdate(r, old), tc.want...)
		})
	}
}

func TestValidateTalosCredentialRequestStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *ichor.TalosCredentialRequestStatus)
		want   []fe
	}{
		{name: "empty status", mutate: func(s *ichor.TalosCredentialRequestStatus) {}},
		{
			name: "issued",
			mutate: func(s *ichor.TalosCredentialRequestStatus) {
				s.Role = "os:reader"
				s.Certificate = selfSignedPEM()
				s.CABundle = selfSignedPEM()
				s.ExpirationTimestamp = &fixedTime
				s.Conditions = []metav1.Condition{goodCondition("Issued")}
			},
		},
		{
			name:   "certificate not PEM",
			mutate: func(s *ichor.TalosCredentialRequestStatus) { s.Certificate = "MIIB..." },
			want:   []fe{invalid("status.certificate")},
		},
		{
			name:   "certificate block is a key",
			mutate: func(s *ichor.TalosCredentialRequestStatus) { s.Certificate = publicKeyPEM("ed25519") },
			want:   []fe{invalid("status.certificate")},
		},
		{
			name: "certificate block with garbage",
			mutate: func(s *ichor.TalosCredentialRequestStatus) {
				s.Certificate = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("garbage")}))
			},
			want: []fe{invalid("status.certificate")},
		},
	}
	for _, bc := range badConditionCases {
		cond := bc.conditions
		cases = append(cases, struct {
			name   string
			mutate func(s *ichor.TalosCredentialRequestStatus)
			want   []fe
		}{bc.name, func(s *ichor.TalosCredentialRequestStatus) { s.Conditions = cond }, bc.want("status.conditions")})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validCredentialRequest()
			r := old.DeepCopy()
			tc.mutate(&r.Status)
			expectErrors(t, ValidateTalosCredentialRequestStatusUpdate(r, old), tc.want...)
		})
	}
}
