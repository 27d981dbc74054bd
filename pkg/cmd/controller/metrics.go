package controller

import (
	"crypto/tls"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsServing serves /metrics over HTTPS only, to callers kube-apiserver
// authenticates by bearer token (a TokenReview: a Prometheus ServiceAccount's)
// and authorizes to get the non-resource URL /metrics (a SubjectAccessReview;
// ichor-metrics-reader in artifacts/controller-rbac.yaml grants it). Workqueue
// depths, reconcile and Talos call latencies name clusters and machines,
// which is why they are not anyone's to read. Like the upload endpoint, it
// speaks HTTP/1.1 only: no HTTP/2 framing for a caller not yet authenticated.
func (o *Options) metricsServing() metricsserver.Options {
	m := metricsserver.Options{
		BindAddress:    o.MetricsBindAddress,
		SecureServing:  true,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.MinVersion = tls.VersionTLS12
			c.NextProtos = []string{"http/1.1"}
		}},
	}
	if o.MetricsCertFile != "" {
		m.CertDir, m.CertName, m.KeyName = filepath.Dir(o.MetricsCertFile), filepath.Base(o.MetricsCertFile), filepath.Base(o.MetricsKeyFile)
	}
	return m
}
