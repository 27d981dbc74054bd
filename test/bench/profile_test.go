package bench

import (
	"testing"

	"github.com/google/pprof/profile"
)

func sample(value int64, leafFirst ...string) *profile.Sample {
	s := &profile.Sample{Value: []int64{1, value}}
	for _, name := range leafFirst {
		s.Location = append(s.Location, &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: name}}}})
	}
	return s
}

// A sample is the work of its innermost frame that names one.
func TestSharesByInnermostWork(t *testing.T) {
	prof := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			// SHA-256 under the front proxy's check, under the audit filter: the check.
			sample(3000, "crypto/sha256.block", "crypto/x509.(*Certificate).Verify",
				"k8s.io/apiserver/pkg/authentication/request/x509.(*Verifier).AuthenticateRequest",
				"k8s.io/apiserver/pkg/endpoints/filters.WithAudit.func1"),
			// The serializer under the etcd storage: encoding.
			sample(1000, "k8s.io/apimachinery/pkg/runtime/serializer/protobuf.(*Serializer).Encode",
				"k8s.io/apiserver/pkg/storage/etcd3.(*store).Create"),
			sample(1000, "main.main"),
		},
	}
	got := map[string]Share{}
	for _, s := range shares(prof, 2) {
		got[s.Work] = s
	}
	for work, want := range map[string]Share{
		"front proxy's client certificate verified": {PerRequest: 1.5, Percent: 60},
		"encoding and decoding":                     {PerRequest: 0.5, Percent: 20},
		otherWork:                                   {PerRequest: 0.5, Percent: 20},
	} {
		if g := got[work]; g.PerRequest != want.PerRequest || g.Percent != want.Percent {
			t.Errorf("%s: got %+v, want %+v", work, g, want)
		}
	}
	if len(got) != 3 {
		t.Errorf("got works %v, want three", got)
	}
}
