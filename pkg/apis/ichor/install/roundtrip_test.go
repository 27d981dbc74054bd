package install

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"

	"ichor.dev/ichor/pkg/apis/ichor/fuzzer"
)

// TestRoundTripTypes fuzzes every internal kind of ichor.dev, converts it to
// v1alpha1, encodes it as JSON and as protobuf (the encoding ichor-apiserver
// stores in etcd), decodes it (which applies the v1alpha1 defaults) and
// converts it back, and requires the result to equal the original.
func TestRoundTripTypes(t *testing.T) {
	roundtrip.RoundTripProtobufTestForAPIGroup(t, Install, fuzzer.Funcs)
}
