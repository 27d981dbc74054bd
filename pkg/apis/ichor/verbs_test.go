package ichor_test

import (
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// TestCustomVerbs: the verbs table names every custom verb, each path of
// a verb once, and every operation type, download and field subresource.
func TestCustomVerbs(t *testing.T) {
	seen, verbs := map[string]bool{}, map[string]bool{}
	for _, r := range ichor.CustomVerbs {
		verbs[r.Verb] = true
		if len(r.On) == 0 || r.Request == "" {
			t.Errorf("%s: a row names where it is asked and by which request", r.Verb)
		}
		for _, on := range r.On {
			if seen[r.Verb+" "+on] {
				t.Errorf("%s %s is in two rows", r.Verb, on)
			}
			seen[r.Verb+" "+on] = true
		}
	}
	for _, verb := range []string{ichor.VerbApprove, ichor.VerbStart, ichor.VerbReclaim, ichor.VerbOverride, ichor.VerbDownload,
		ichor.VerbUpdate, ichor.VerbGrant, ichor.VerbAuthenticate} {
		if !verbs[verb] {
			t.Errorf("verb %s is in no row", verb)
		}
	}
	for _, d := range ichor.Operations {
		if !seen[ichor.VerbStart+" talosoperations/"+string(d.Type)] {
			t.Errorf("start on talosoperations/%s is in no row", d.Type)
		}
	}
	for _, d := range ichor.Downloads {
		if !seen[ichor.VerbDownload+" "+d.Path()] {
			t.Errorf("download on %s is in no row", d.Path())
		}
	}
	for _, f := range ichor.FieldSubresources {
		if !seen[ichor.VerbUpdate+" "+f.Path()] {
			t.Errorf("update on %s is in no row", f.Path())
		}
	}
}
