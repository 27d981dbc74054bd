package provisioningnetworks

import (
	"net/netip"
	"strings"
	"testing"
)

func TestContains(t *testing.T) {
	nets := []netip.Prefix{netip.MustParsePrefix("10.5.0.0/24"), netip.MustParsePrefix("fd00::/64")}
	for _, tc := range []struct {
		address string
		inside  bool
		why     string
	}{
		{"10.5.0.10:50000", true, ""},
		{"[fd00::5]:50000", true, ""},
		{"[::ffff:10.5.0.7]:50000", true, ""},
		{"10.5.1.10:50000", false, "outside the provisioning networks"},
		{"node.example.com:50000", false, "names a host, not an IP address"},
		{"127.0.0.1:6443", false, "outside"},
	} {
		why, inside := Contains(nets, tc.address)
		if inside != tc.inside || !strings.Contains(why, tc.why) {
			t.Errorf("Contains(%s) = %q, %v; want %v with %q", tc.address, why, inside, tc.inside, tc.why)
		}
	}
	if why, inside := Contains(nil, "10.5.0.10:50000"); inside || !strings.Contains(why, "no provisioning networks") {
		t.Errorf("no networks: %q, %v", why, inside)
	}
}
