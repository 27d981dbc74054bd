package talossim

import (
	stdtls "crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
)

// maintenanceCommonName is the CN of a Talos maintenance-mode server certificate.
const maintenanceCommonName = "maintenance-service.talos.dev"

// serverCertValidity and serverCertRefresh mirror Talos: API server certs live 24h and are renewed at half-life.
const (
	serverCertValidity = 24 * time.Hour
	serverCertRefresh  = 12 * time.Hour
)

// maintenanceIdentity is the self-signed server identity used while the node has no config; it is made
// once per node life so its SPKI fingerprint stays stable for pinning clients.
type maintenanceIdentity struct {
	cert        stdtls.Certificate
	fingerprint string
}

// newMaintenanceIdentity creates a self-signed Ed25519 CA and a ServerAuth leaf like machined's maintenance
// secrets controller, with IP SANs for ips and DNS SANs for dnsNames.
func newMaintenanceIdentity(ips []netip.Addr, dnsNames []string) (*maintenanceIdentity, error) {
	ca, err := x509.NewSelfSignedCertificateAuthority()
	if err != nil {
		return nil, fmt.Errorf("creating maintenance CA: %w", err)
	}

	kp, err := x509.NewKeyPair(ca,
		x509.IPAddresses(toNetIPs(ips)),
		x509.DNSNames(dnsNames),
		x509.CommonName(maintenanceCommonName),
		x509.NotAfter(time.Now().Add(x509.DefaultCertificateValidityDuration)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return nil, fmt.Errorf("creating maintenance server certificate: %w", err)
	}

	leaf, err := stdx509.ParseCertificate(kp.Certificate.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parsing maintenance server certificate: %w", err)
	}

	cert := *kp.Certificate
	cert.Leaf = leaf

	return &maintenanceIdentity{cert: cert, fingerprint: x509.SPKIFingerprint(leaf).String()}, nil
}

// baseServerTLSConfig returns the defaults of Talos's TLS helper: TLS 1.3 only, h2, no session tickets.
func baseServerTLSConfig() *stdtls.Config {
	return &stdtls.Config{
		MinVersion:             stdtls.VersionTLS13,
		NextProtos:             []string{"h2"},
		SessionTicketsDisabled: true,
	}
}

// maintenanceTLSConfig is apid's maintenance-mode server config: self-signed cert, no client certificate.
func (m *maintenanceIdentity) tlsConfig() *stdtls.Config {
	cfg := baseServerTLSConfig()
	cfg.Certificates = []stdtls.Certificate{m.cert}
	cfg.ClientAuth = stdtls.NoClientCert

	return cfg
}

// verifyExtKeyUsage rejects any non-CA certificate in the verified client chain whose extended key usage
// is not exactly ClientAuth, as Talos's apid does.
func verifyExtKeyUsage(_ [][]byte, verifiedChains [][]*stdx509.Certificate) error {
	if len(verifiedChains) == 0 {
		return errors.New("no verified chains")
	}

	for _, cert := range verifiedChains[0] {
		if cert.IsCA {
			continue
		}

		if !slices.Equal(cert.ExtKeyUsage, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}) {
			return fmt.Errorf("certificate %q is missing the client auth extended key usage", cert.Subject)
		}
	}

	return nil
}

// serverCertCache keeps the configured-mode server certificate until its inputs change or it nears expiry.
type serverCertCache struct {
	mu      sync.Mutex
	key     string
	cert    *stdtls.Certificate
	renewAt time.Time
}

// configuredTLSInput is everything the configured-mode server TLS config depends on.
type configuredTLSInput struct {
	cfg      config.Config
	osCA     *x509.PEMEncodedCertificateAndKey
	ips      []netip.Addr
	hostname string
}

// configuredTLSConfig builds apid's normal-mode server config: a cert signed by machine.ca and mutual TLS
// against machine.ca plus machine.acceptedCAs with the ClientAuth-only usage check.
func (c *serverCertCache) configuredTLSConfig(in configuredTLSInput) (*stdtls.Config, error) {
	sec := in.cfg.Machine().Security()

	issuing := sec.IssuingCA()
	if issuing == nil || len(issuing.Crt) == 0 {
		return nil, errors.New("machine config has no machine.ca")
	}

	if len(issuing.Key) == 0 {
		if in.osCA == nil || string(in.osCA.Crt) != string(issuing.Crt) {
			return nil, errors.New("machine.ca has no key, and neither Options.OSCA nor a control plane through Options.Trustd offers it")
		}

		issuing = in.osCA
	}

	pool := stdx509.NewCertPool()
	if !pool.AppendCertsFromPEM(issuing.Crt) {
		return nil, errors.New("parsing machine.ca certificate")
	}

	for _, ca := range sec.AcceptedCAs() {
		if ca == nil || !pool.AppendCertsFromPEM(ca.Crt) {
			return nil, errors.New("parsing machine.acceptedCAs certificate")
		}
	}

	cert, err := c.serverCert(issuing, in, sec.CertSANs())
	if err != nil {
		return nil, err
	}

	cfg := baseServerTLSConfig()
	cfg.Certificates = []stdtls.Certificate{*cert}
	cfg.ClientAuth = stdtls.RequireAndVerifyClientCert
	cfg.ClientCAs = pool
	cfg.VerifyPeerCertificate = verifyExtKeyUsage

	return cfg, nil
}

// serverCert returns a cached or fresh server certificate signed by issuing, with the node's IPs,
// hostname and machine.certSANs as SANs.
func (c *serverCertCache) serverCert(issuing *x509.PEMEncodedCertificateAndKey, in configuredTLSInput, certSANs []string) (*stdtls.Certificate, error) {
	ips := slices.Clone(in.ips)
	dnsNames := []string{in.hostname}

	for _, san := range certSANs {
		if ip, err := netip.ParseAddr(san); err == nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, san)
		}
	}

	ips = uniqueAddrs(ips)
	slices.Sort(dnsNames)
	dnsNames = slices.Compact(dnsNames)

	key := string(issuing.Crt) + "\x00" + string(issuing.Key) + "\x00" + fmt.Sprint(ips) + "\x00" + strings.Join(dnsNames, ",")

	c.mu.Lock()
	defer c.mu.Unlock()

	now := time.Now()
	if c.cert != nil && c.key == key && now.Before(c.renewAt) {
		return c.cert, nil
	}

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(issuing)
	if err != nil {
		return nil, fmt.Errorf("loading machine.ca: %w", err)
	}

	kp, err := x509.NewKeyPair(ca,
		x509.IPAddresses(toNetIPs(ips)),
		x509.DNSNames(dnsNames),
		x509.CommonName(in.hostname),
		x509.NotAfter(now.Add(serverCertValidity)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return nil, fmt.Errorf("issuing API server certificate: %w", err)
	}

	c.key, c.cert, c.renewAt = key, kp.Certificate, now.Add(serverCertRefresh)

	return c.cert, nil
}

// toNetIPs converts netip addresses to the net.IP form the x509 helpers take.
func toNetIPs(addrs []netip.Addr) []net.IP {
	out := make([]net.IP, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, net.IP(a.AsSlice()))
	}

	return out
}

// uniqueAddrs returns the valid addresses of addrs, unmapped, in first-seen order without duplicates.
func uniqueAddrs(addrs []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs))

	for _, a := range addrs {
		a = a.Unmap()
		if a.IsValid() && !a.IsUnspecified() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}

	return out
}
