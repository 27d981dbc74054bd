package controller

import (
	"crypto/tls"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestFlagsAndDefaults(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--discovery-namespace=machines", "--machine-recheck-interval=30s", "--zap-log-level=debug"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("valid flags refused: %v", err)
	}
	if !o.LeaderElect || o.LeaderElectionID != DefaultLeaderElectionID || o.LeaderElectionNamespace != DefaultNamespace {
		t.Errorf("leader election defaults: %v %q %q", o.LeaderElect, o.LeaderElectionID, o.LeaderElectionNamespace)
	}
	if o.DiscoveryNamespace != "machines" || o.MachineRecheckInterval != 30*time.Second {
		t.Errorf("flags not applied: %+v", o)
	}
	for _, name := range []string{"kubeconfig", "metrics-bind-address", "health-probe-bind-address", "leader-elect", "zap-encoder"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no --%s flag", name)
		}
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	o := NewOptions()
	o.LeaderElectionID = "Not A Name"
	o.DiscoveryNamespace = ""
	o.ScanProbesPerSecond = 0
	o.MachineConcurrency = 0
	err := o.Validate()
	if err == nil {
		t.Fatal("invalid options accepted")
	}
	for _, want := range []string{"--leader-election-id", "--discovery-namespace", "--scan-probes-per-second", "--machine-concurrency"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// TestMetricsServing: the metrics endpoint always serves HTTPS behind
// kube-apiserver's authentication and authorization; its certificate
// files go together, in one directory.
func TestMetricsServing(t *testing.T) {
	o := NewOptions()
	m := o.metricsServing()
	if !m.SecureServing || m.FilterProvider == nil || m.BindAddress != ":8443" || m.CertDir != "" {
		t.Errorf("default metrics serving: %+v", m)
	}
	// controller-runtime offers h2 unless told otherwise.
	c := &tls.Config{NextProtos: []string{"h2"}}
	for _, opt := range m.TLSOpts {
		opt(c)
	}
	if !slices.Equal(c.NextProtos, []string{"http/1.1"}) || c.MinVersion != tls.VersionTLS12 {
		t.Errorf("metrics TLS: protocols %v, minimum version %x", c.NextProtos, c.MinVersion)
	}
	o.MetricsCertFile, o.MetricsKeyFile = "/tls/tls.crt", "/tls/tls.key"
	if m := o.metricsServing(); m.CertDir != "/tls" || m.CertName != "tls.crt" || m.KeyName != "tls.key" || !m.SecureServing {
		t.Errorf("metrics serving with a certificate: %+v", m)
	}
	for _, files := range [][2]string{{"/tls/tls.crt", ""}, {"", "/tls/tls.key"}, {"/a/tls.crt", "/b/tls.key"}} {
		o.MetricsCertFile, o.MetricsKeyFile = files[0], files[1]
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--metrics-tls") {
			t.Errorf("certificate %q, key %q: %v", files[0], files[1], err)
		}
	}
}

// The profiles have no authentication: they are served on loopback or not at all.
func TestPprofOnLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"0": true, "127.0.0.1:6060": true, "[::1]:6060": true,
		":6060": false, "0.0.0.0:6060": false, "10.0.0.5:6060": false, "localhost:6060": false, "6060": false,
	} {
		o := NewOptions()
		o.PprofBindAddress = addr
		if err := o.Validate(); (err == nil) != ok {
			t.Errorf("--pprof-bind-address=%s: got %v, want accepted %v", addr, err, ok)
		}
	}
}
