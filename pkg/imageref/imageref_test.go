package imageref

import "testing"

func TestWithTag(t *testing.T) {
	for _, tc := range []struct{ ref, want string }{
		{"siderolabs/installer:v1.13.0", "siderolabs/installer:v1.13.1"},
		{"siderolabs/installer", "siderolabs/installer:v1.13.1"},
		{"mirror.internal:5000/siderolabs/installer", "mirror.internal:5000/siderolabs/installer:v1.13.1"},
		{"mirror.internal:5000/siderolabs/installer:v1.12.0@sha256:abcd", "mirror.internal:5000/siderolabs/installer:v1.13.1"},
		{"installer@sha256:abcd", "installer:v1.13.1"},
	} {
		if got := WithTag(tc.ref, "v1.13.1"); got != tc.want {
			t.Errorf("WithTag(%q) = %q, want %q", tc.ref, got, tc.want)
		}
	}
}
