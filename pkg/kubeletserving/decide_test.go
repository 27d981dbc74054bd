package kubeletserving

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"net/netip"
	"net/url"
	"testing"

	certv1 "k8s.io/api/certificates/v1"

	"ichor.dev/ichor/pkg/talos"
)

var identity = &talos.Identity{
	Nodename:         "worker-1",
	Hostname:         "worker-1",
	FQDN:             "worker-1.example.internal",
	KubeletAddresses: []netip.Addr{netip.MustParseAddr("10.5.0.11"), netip.MustParseAddr("fd00::11")},
}

// request makes a kubelet serving CSR as the kubelet's certificate manager
// does, after edit has changed the template.
func request(t *testing.T, edit func(*x509.CertificateRequest)) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:worker-1", Organization: []string{"system:nodes"}},
		DNSNames:    []string{"worker-1"},
		IPAddresses: []net.IP{net.ParseIP("10.5.0.11")},
	}
	if edit != nil {
		edit(tmpl)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func csrOf(req []byte, edit func(*certv1.CertificateSigningRequestSpec)) *certv1.CertificateSigningRequest {
	csr := &certv1.CertificateSigningRequest{Spec: certv1.CertificateSigningRequestSpec{
		Request:    req,
		SignerName: Signer,
		Username:   "system:node:worker-1",
		Groups:     []string{"system:nodes", "system:authenticated"},
		Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
	}}
	if edit != nil {
		edit(&csr.Spec)
	}
	return csr
}

func TestDecide(t *testing.T) {
	tampered := request(t, nil)
	block, _ := pem.Decode(tampered)
	block.Bytes[len(block.Bytes)-3] ^= 0xff // inside the signature
	tampered = pem.EncodeToMemory(block)

	for _, c := range []struct {
		name   string
		csr    *certv1.CertificateSigningRequest
		reason string
	}{
		{"the kubelet's request", csrOf(request(t, nil), nil), ReasonApproved},
		{"with key encipherment, as for an RSA key", csrOf(request(t, nil), func(s *certv1.CertificateSigningRequestSpec) {
			s.Usages = []certv1.KeyUsage{certv1.UsageKeyEncipherment, certv1.UsageServerAuth, certv1.UsageDigitalSignature}
		}), ReasonApproved},
		{"hostname, FQDN and IPv6", csrOf(request(t, func(r *x509.CertificateRequest) {
			r.DNSNames = []string{"worker-1", "worker-1.example.internal"}
			r.IPAddresses = []net.IP{net.ParseIP("10.5.0.11"), net.ParseIP("fd00::11")}
		}), nil), ReasonApproved},
		{"not PEM", csrOf([]byte("hello"), nil), ReasonBadRequest},
		{"a bad signature", csrOf(tampered, nil), ReasonBadRequest},
		{"another requester", csrOf(request(t, nil), func(s *certv1.CertificateSigningRequestSpec) { s.Username = "system:node:worker-2" }), ReasonWrongRequester},
		{"a user, not a node", csrOf(request(t, nil), func(s *certv1.CertificateSigningRequestSpec) { s.Username = "alice" }), ReasonWrongRequester},
		{"not in system:nodes", csrOf(request(t, nil), func(s *certv1.CertificateSigningRequestSpec) { s.Groups = []string{"system:authenticated"} }), ReasonWrongRequester},
		{"an extra organization", csrOf(request(t, func(r *x509.CertificateRequest) {
			r.Subject.Organization = []string{"system:nodes", "system:masters"}
		}), nil), ReasonWrongSubject},
		{"an organizational unit", csrOf(request(t, func(r *x509.CertificateRequest) {
			r.Subject.OrganizationalUnit = []string{"x"}
		}), nil), ReasonWrongSubject},
		{"no organization", csrOf(request(t, func(r *x509.CertificateRequest) { r.Subject.Organization = nil }), nil), ReasonWrongSubject},
		{"an email SAN", csrOf(request(t, func(r *x509.CertificateRequest) { r.EmailAddresses = []string{"a@b.c"} }), nil), ReasonForbiddenSAN},
		{"a URI SAN", csrOf(request(t, func(r *x509.CertificateRequest) {
			r.URIs = []*url.URL{{Scheme: "spiffe", Host: "cluster", Path: "/node"}}
		}), nil), ReasonForbiddenSAN},
		{"no SAN", csrOf(request(t, func(r *x509.CertificateRequest) { r.DNSNames, r.IPAddresses = nil, nil }), nil), ReasonNoSAN},
		{"a foreign DNS name", csrOf(request(t, func(r *x509.CertificateRequest) {
			r.DNSNames = []string{"worker-1", "kubernetes.default.svc"}
		}), nil), ReasonUnknownDNSName},
		{"a neighbour's IP", csrOf(request(t, func(r *x509.CertificateRequest) {
			r.IPAddresses = []net.IP{net.ParseIP("10.5.0.11"), net.ParseIP("10.5.0.12")}
		}), nil), ReasonUnknownIPAddress},
		{"client auth too", csrOf(request(t, nil), func(s *certv1.CertificateSigningRequestSpec) {
			s.Usages = append(s.Usages, certv1.UsageClientAuth)
		}), ReasonBadUsages},
		{"server auth alone", csrOf(request(t, nil), func(s *certv1.CertificateSigningRequestSpec) {
			s.Usages = []certv1.KeyUsage{certv1.UsageServerAuth}
		}), ReasonBadUsages},
		{"a usage twice", csrOf(request(t, nil), func(s *certv1.CertificateSigningRequestSpec) {
			s.Usages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth, certv1.UsageServerAuth}
		}), ReasonBadUsages},
		{"an extra extension", csrOf(request(t, func(r *x509.CertificateRequest) {
			r.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Value: []byte{0x30, 0x03, 0x01, 0x01, 0xff}}}
		}), nil), ReasonExtraExtension},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.csr, "worker-1", identity)
			if d.Reason != c.reason || d.Approve != (c.reason == ReasonApproved) || d.Message == "" {
				t.Errorf("Decide = %+v, want reason %s", d, c.reason)
			}
		})
	}

	// A node whose Talos API reports another name is not the node the request names.
	other := *identity
	other.Nodename = "worker-9"
	if d := Decide(csrOf(request(t, nil), nil), "worker-1", &other); d.Approve || d.Reason != ReasonWrongSubject {
		t.Errorf("name mismatch: %+v", d)
	}
}

func TestNodeName(t *testing.T) {
	if name, ok := NodeName(csrOf(request(t, nil), nil)); !ok || name != "worker-1" {
		t.Errorf("NodeName = %q, %t", name, ok)
	}
	for _, bad := range [][]byte{[]byte("junk"), request(t, func(r *x509.CertificateRequest) { r.Subject.CommonName = "worker-1" })} {
		if name, ok := NodeName(csrOf(bad, nil)); ok {
			t.Errorf("NodeName of a request naming no node = %q", name)
		}
	}
}
