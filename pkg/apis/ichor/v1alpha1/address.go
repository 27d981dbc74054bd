package v1alpha1

import (
	"net/netip"
	"strings"
)

// AddressKey is a machine address in one spelling, so that two spellings
// of one endpoint (an IPv4-mapped IPv6 address, a host name's case, a
// missing default port) are seen as the same: the port defaulted, an IP
// address unmapped and printed canonically, a name lower-cased.
func AddressKey(address string) string {
	address = WithDefaultPort(address)
	if ap, err := netip.ParseAddrPort(address); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()).String()
	}
	return strings.ToLower(address)
}

// HoldsAddress says whether m has its address: it pinned the certificate
// presented there, or was approved. Another TalosMachine at that address,
// in any namespace, would be a second claim on that node, and the next time
// the node entered maintenance mode its claimant could pin it.
func HoldsAddress(m *TalosMachine) bool {
	return m.Status.Maintenance != nil || m.Status.Approval != nil && m.Status.Approval.Decision == ApprovalApproved
}
