package talos_test

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"

	dto "github.com/prometheus/client_model/go"

	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/test/talossim"
)

// calls is how many calls of method ended with code, as CallDuration counted them.
func calls(t *testing.T, method, code string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := talos.CallDuration.WithLabelValues(method, code).(interface{ Write(*dto.Metric) error }).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestCallsAreTimed: every Talos call is observed by method and code, a
// node that does not answer as Unavailable, which NotAnswering recognises.
func TestCallsAreTimed(t *testing.T) {
	const version = "/machine.MachineService/Version"
	n := startNode(t, simOptions())
	before := calls(t, version, "OK")
	if _, err := session(t, n.Addr(), talos.Observe()).Facts(callContext(t)); err != nil {
		t.Fatal(err)
	}
	if got := calls(t, version, "OK") - before; got != 1 {
		t.Errorf("%d Version calls observed, want 1", got)
	}

	if err := n.SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	before = calls(t, version, "Unavailable")
	_, err := session(t, n.Addr(), talos.Observe()).Facts(callContext(t))
	if !talos.NotAnswering(err) {
		t.Errorf("an unreachable node's error is not NotAnswering: %v", err)
	}
	if got := calls(t, version, "Unavailable") - before; got != 1 {
		t.Errorf("%d Version calls to an unreachable node observed, want 1", got)
	}
}

// TestARefusedCertificateIsAnAnswer: a node whose certificate is not of the
// cluster's CA (here one in maintenance mode, self-signed) answers; it is
// not taken as off.
func TestARefusedCertificateIsAnAnswer(t *testing.T) {
	n := startNode(t, simOptions())
	bundle, _ := controlPlaneConfig(t)
	creds, err := talos.MintCredentials(bundle, role.MakeSet(role.Admin), time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s, err := talos.Machinery{}.Configured(callContext(t), n.Addr(), creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.Version(callContext(t))
	if err == nil || talos.NotAnswering(err) {
		t.Errorf("a node presenting a certificate of another CA: %v, taken as not answering", err)
	}
}
