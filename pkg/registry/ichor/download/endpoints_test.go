package download

import (
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// TestEveryDownloadIsServed: an endpoint serves each download of
// ichor.Downloads, and every endpoint is one of them.
func TestEveryDownloadIsServed(t *testing.T) {
	storage := Storage(Deps{})
	for _, d := range ichor.Downloads {
		s, ok := storage[d.Path()]
		if !ok {
			t.Errorf("%s is a download no endpoint serves: add one to endpoints", d.Path())
			continue
		}
		if got := s.(interface{ ProducesMIMETypes(string) []string }).ProducesMIMETypes("GET"); len(got) != 1 || got[0] != d.ContentType {
			t.Errorf("%s is served as %v, not %s", d.Path(), got, d.ContentType)
		}
	}
	for path := range endpoints {
		if _, ok := storage[path]; !ok {
			t.Errorf("endpoints serve %s, which is not in ichor.Downloads", path)
		}
	}
}
