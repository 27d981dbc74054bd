// Package kubeletserving decides kubelet serving certificate requests
// (signer kubernetes.io/kubelet-serving) against a node's identity as its
// own Talos API reports it. It approves exactly a request for that identity
// and denies, with a reason, one that is malformed or asks for more; what it
// cannot place is the caller's to leave pending.
package kubeletserving

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	certv1 "k8s.io/api/certificates/v1"

	"ichor.dev/ichor/pkg/talos"
)

// Signer is the signer whose requests this package decides; no other.
const Signer = certv1.KubeletServingSignerName

// ReasonApproved is the reason of the Approved condition Ichor sets.
const ReasonApproved = "IchorKubeletServing"

// Reasons of the Denied condition Ichor sets, one per rule broken.
const (
	ReasonBadRequest       = "IchorBadRequest"
	ReasonWrongRequester   = "IchorWrongRequester"
	ReasonWrongSubject     = "IchorWrongSubject"
	ReasonForbiddenSAN     = "IchorForbiddenSAN"
	ReasonNoSAN            = "IchorNoSAN"
	ReasonUnknownDNSName   = "IchorUnknownDNSName"
	ReasonUnknownIPAddress = "IchorUnknownIPAddress"
	ReasonBadUsages        = "IchorBadUsages"
	ReasonExtraExtension   = "IchorExtraExtension"
)

const (
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
)

// oidSubjectAltName is the one extension a kubelet serving request carries.
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// The two usage sets the signer permits: key encipherment only matters to RSA keys.
var permittedUsages = [][]certv1.KeyUsage{
	{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
	{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageServerAuth},
}

// Decision is the verdict on one request.
type Decision struct {
	// Approve is true for a request to approve; false for one to deny.
	Approve bool
	// Reason is the condition reason: ReasonApproved or a deny reason.
	Reason string
	// Message says why, naming the node and what was wrong.
	Message string
}

func deny(reason, format string, args ...any) Decision {
	return Decision{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// NodeName is the node a request asks a serving certificate for, from its
// subject's common name (system:node:<name>), without checking anything
// else. ok is false when the request cannot be read or names no node.
func NodeName(csr *certv1.CertificateSigningRequest) (name string, ok bool) {
	req, err := parse(csr.Spec.Request)
	if err != nil {
		return "", false
	}
	name, found := strings.CutPrefix(req.Subject.CommonName, nodeUserPrefix)
	return name, found && name != ""
}

func parse(data []byte) (*x509.CertificateRequest, error) {
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" || len(strings.TrimSpace(string(rest))) > 0 {
		return nil, fmt.Errorf("spec.request is not one PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("spec.request does not parse: %v", err)
	}
	return req, nil
}

// Decide judges a kubelet serving request for node against the node's
// identity read over its Talos API (never the request's or the Node
// object's word). The caller has found node as the request's NodeName.
func Decide(csr *certv1.CertificateSigningRequest, node string, id *talos.Identity) Decision {
	req, err := parse(csr.Spec.Request)
	if err != nil {
		return deny(ReasonBadRequest, "%v", err)
	}
	if err := req.CheckSignature(); err != nil {
		return deny(ReasonBadRequest, "the request's signature does not verify: %v", err)
	}
	user := nodeUserPrefix + node
	if csr.Spec.Username != user || !slices.Contains(csr.Spec.Groups, nodesGroup) {
		return deny(ReasonWrongRequester, "requested by %q in groups %v; only %s in %s may request this certificate",
			csr.Spec.Username, csr.Spec.Groups, user, nodesGroup)
	}
	if !exactSubject(req, user) {
		return deny(ReasonWrongSubject, "subject %q; want exactly CN=%s, O=%s", req.Subject.String(), user, nodesGroup)
	}
	if id.Nodename != node {
		return deny(ReasonWrongSubject, "the node's Talos API reports node name %q, not %q", id.Nodename, node)
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return deny(ReasonForbiddenSAN, "email or URI subject alternative names are not allowed (%v %v)", req.EmailAddresses, req.URIs)
	}
	if len(req.DNSNames) == 0 && len(req.IPAddresses) == 0 {
		return deny(ReasonNoSAN, "the request names no DNS name or IP address")
	}
	names := []string{id.Nodename, id.Hostname, id.FQDN}
	for _, dns := range req.DNSNames {
		if dns == "" || !slices.Contains(names, dns) {
			return deny(ReasonUnknownDNSName, "DNS name %q is not node %s's name or hostname", dns, node)
		}
	}
	for _, ip := range req.IPAddresses {
		addr, ok := netip.AddrFromSlice(ip)
		if !ok || !slices.Contains(id.KubeletAddresses, addr.Unmap()) {
			return deny(ReasonUnknownIPAddress, "IP address %s is not one of node %s's addresses %v", ip, node, id.KubeletAddresses)
		}
	}
	if !permitted(csr.Spec.Usages) {
		return deny(ReasonBadUsages, "usages %v; want digital signature and server auth (key encipherment optional)", csr.Spec.Usages)
	}
	for _, ext := range req.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			return deny(ReasonExtraExtension, "the request carries extension %s; only subject alternative names are allowed", ext.Id)
		}
	}
	return Decision{Approve: true, Reason: ReasonApproved,
		Message: fmt.Sprintf("Ichor checked the request against node %s's identity from its Talos API", node)}
}

// exactSubject is true for a subject of exactly CN=user, O=system:nodes.
func exactSubject(req *x509.CertificateRequest, user string) bool {
	oidCN, oidO := asn1.ObjectIdentifier{2, 5, 4, 3}, asn1.ObjectIdentifier{2, 5, 4, 10}
	if len(req.Subject.Names) != 2 {
		return false
	}
	for _, n := range req.Subject.Names {
		v, ok := n.Value.(string)
		switch {
		case !ok:
			return false
		case n.Type.Equal(oidCN) && v == user:
		case n.Type.Equal(oidO) && v == nodesGroup:
		default:
			return false
		}
	}
	return req.Subject.CommonName == user && slices.Equal(req.Subject.Organization, []string{nodesGroup})
}

// permitted is true for one of the usage sets the signer permits, in any order.
func permitted(usages []certv1.KeyUsage) bool {
	got := slices.Clone(usages)
	slices.Sort(got)
	got = slices.Compact(got)
	if len(got) != len(usages) {
		return false
	}
	for _, want := range permittedUsages {
		w := slices.Clone(want)
		slices.Sort(w)
		if slices.Equal(got, w) {
			return true
		}
	}
	return false
}
