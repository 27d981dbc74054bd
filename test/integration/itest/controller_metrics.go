package itest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"testing"
	"time"
)

// ControllerMetricsClient is an HTTPS client that trusts the CA of
// ichor-controller's serving certificate (its metrics and upload endpoints).
func ControllerMetricsClient(t testing.TB) *http.Client {
	t.Helper()
	caPEM, err := os.ReadFile(CP.ControllerUpload.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}}
}

// GetWithToken GETs url with c, as a bearer of token when there is one,
// and returns the status and body; a request that gets no answer is
// status 0 with the error as its body.
func GetWithToken(ctx context.Context, t testing.TB, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close() //nolint:errcheck
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
