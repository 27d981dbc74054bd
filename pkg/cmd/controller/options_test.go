package controller

import (
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
