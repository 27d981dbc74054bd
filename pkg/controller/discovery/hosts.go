package discovery

import (
	"iter"
	"net/netip"
)

// hosts yields the addresses of p a machine can have: for IPv4 networks
// larger than /31 the network and broadcast addresses are left out, for
// IPv6 networks larger than /127 the subnet-router anycast address.
func hosts(p netip.Prefix) iter.Seq[netip.Addr] {
	return func(yield func(netip.Addr) bool) {
		p = p.Masked()
		first := p.Addr()
		skipEnds := (first.Is4() && p.Bits() < 31) || (first.Is6() && p.Bits() < 127)
		for a := first; a.IsValid() && p.Contains(a); a = a.Next() {
			if skipEnds && a == first {
				continue
			}
			if skipEnds && first.Is4() && !p.Contains(a.Next()) {
				return // the broadcast address
			}
			if !yield(a) {
				return
			}
		}
	}
}

// addresses yields the hosts of every network in turn, at most limit of
// them; truncated reports whether there were more.
func addresses(networks []netip.Prefix, limit int) (seq iter.Seq[netip.Addr], total int, truncated bool) {
	for _, p := range networks {
		n := hostCount(p)
		if total+n > limit {
			total, truncated = limit, true
			break
		}
		total += n
	}
	seq = func(yield func(netip.Addr) bool) {
		left := limit
		for _, p := range networks {
			for a := range hosts(p) {
				if left == 0 || !yield(a) {
					return
				}
				left--
			}
		}
	}
	return seq, total, truncated
}

// hostCount is how many addresses hosts(p) yields, saturated at 1<<30.
func hostCount(p netip.Prefix) int {
	bits := p.Addr().BitLen() - p.Bits()
	if bits >= 30 {
		return 1 << 30
	}
	n := 1 << bits
	switch {
	case p.Addr().Is4() && p.Bits() < 31:
		n -= 2
	case p.Addr().Is6() && p.Bits() < 127:
		n--
	}
	return n
}
