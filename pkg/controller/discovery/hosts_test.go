package discovery

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func collect(p string) []string {
	var out []string
	for a := range hosts(netip.MustParsePrefix(p)) {
		out = append(out, a.String())
	}
	return out
}

func TestHosts(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"10.5.0.0/30", []string{"10.5.0.1", "10.5.0.2"}},
		{"10.5.0.8/31", []string{"10.5.0.8", "10.5.0.9"}},
		{"10.5.0.7/32", []string{"10.5.0.7"}},
		{"fd00::/126", []string{"fd00::1", "fd00::2", "fd00::3"}},
		{"fd00::4/127", []string{"fd00::4", "fd00::5"}},
		{"255.255.255.252/30", []string{"255.255.255.253", "255.255.255.254"}},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126", []string{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffd", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}},
	} {
		if got := collect(tc.prefix); !slices.Equal(got, tc.want) {
			t.Errorf("hosts(%s) = %v, want %v", tc.prefix, got, tc.want)
		}
		if n := hostCount(netip.MustParsePrefix(tc.prefix)); n != len(tc.want) {
			t.Errorf("hostCount(%s) = %d, want %d", tc.prefix, n, len(tc.want))
		}
	}
	if n := len(collect("10.0.0.0/16")); n != 65534 || hostCount(netip.MustParsePrefix("10.0.0.0/16")) != n {
		t.Errorf("a /16 has %d hosts", n)
	}
}

func TestAddressesAreBounded(t *testing.T) {
	nets := []netip.Prefix{netip.MustParsePrefix("10.5.0.0/29"), netip.MustParsePrefix("10.6.0.0/29")}
	seq, total, truncated := addresses(nets, 100)
	if total != 12 || truncated {
		t.Errorf("total %d truncated %v", total, truncated)
	}
	if got := slices.Collect(seq); len(got) != 12 || got[0].String() != "10.5.0.1" || got[11].String() != "10.6.0.6" {
		t.Errorf("addresses %v", got)
	}
	seq, total, truncated = addresses(nets, 8)
	if got := slices.Collect(seq); len(got) != 8 || total != 8 || !truncated {
		t.Errorf("limited to 8: %d addresses, total %d, truncated %v", len(got), total, truncated)
	}
}

func TestMachineName(t *testing.T) {
	const fp = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
	for _, tc := range []struct {
		uuid, want string
	}{
		{"0B3B7C56-5D0C-4C8E-9A51-2F7F6E0D9A11", "machine-0b3b7c56-5d0c-4c8e-9a51-2f7f6e0d9a11"},
		{"", ""},
		{"00000000-0000-0000-0000-000000000000", ""},
		{"FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", ""},
		{"not-a-uuid", ""},
	} {
		got := machineName(tc.uuid, fp)
		if tc.want != "" && got != tc.want {
			t.Errorf("machineName(%q) = %q, want %q", tc.uuid, got, tc.want)
		}
		if tc.want == "" && (!strings.HasPrefix(got, "machine-spki-") || got != machineName("", fp)) {
			t.Errorf("machineName(%q) = %q, want the fingerprint-derived name", tc.uuid, got)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 || len(got) > 63 {
			t.Errorf("%q is not a valid object name: %v", got, errs)
		}
	}
}
