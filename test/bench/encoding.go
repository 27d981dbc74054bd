package bench

import (
	"context"
	"fmt"
	"mime"
	"net/http"

	"k8s.io/client-go/rest"
)

// encodings are the media types a Kubernetes client can ask for.
var encodings = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/cbor"}

// negotiate asks for a LIST of ns in each encoding and reports which ones the
// path answers in; the others answer 406 Not Acceptable.
func negotiate(ctx context.Context, p *path, ns string) (map[string]bool, error) {
	hc, err := rest.HTTPClientFor(p.config)
	if err != nil {
		return nil, err
	}
	served := map[string]bool{}
	for _, enc := range encodings {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url(ns)+"?limit=1", nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", enc)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s: GET as %s: %w", p.name, enc, err)
		}
		resp.Body.Close()
		got, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		switch {
		case resp.StatusCode == http.StatusOK:
			served[enc] = got == enc
		case resp.StatusCode == http.StatusNotAcceptable:
			served[enc] = false
		default:
			return nil, fmt.Errorf("%s: GET as %s answered %s", p.name, enc, resp.Status)
		}
	}
	return served, nil
}
