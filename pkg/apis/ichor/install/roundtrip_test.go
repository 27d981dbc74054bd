package install

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"

	"ichor.dev/ichor/pkg/apis/ichor/fuzzer"
)

// TestRoundTripTypes fuzzes every internal kind of ichor.dev, converts it to
// v1alpha1, encodes it as JSON, decodes it (which applies the v1alpha1
// defaults) and converts it back, and requires the result to equal the
// original. The types have no protobuf encoding, so RoundTripTestForAPIGroup,
// which skips protobuf, is the right entry point; the serialization is JSON.
func TestRoundTripTypes(t *testing.T) {
	roundtrip.RoundTripTestForAPIGroup(t, Install, fuzzer.Funcs)
}
