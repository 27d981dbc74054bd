package itest

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/internal/proc"
)

// HAProgress is how many more requests the load must complete after each
// fault before the next step: ICHOR_HA_FULL=1 (make test-ha-full) runs
// each fault under load ten times longer.
func HAProgress() int64 {
	if os.Getenv("ICHOR_HA_FULL") != "" {
		return 2000
	}
	return 200
}

// WaitProgress waits until the load has completed n more requests.
func WaitProgress(ctx context.Context, t *testing.T, l *APILoad, n int64) {
	t.Helper()
	target := l.Sent.Load() + n
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		return l.Sent.Load() >= target, nil
	}); err != nil {
		t.Fatalf("the load stalled at %d requests (want %d): %v", l.Sent.Load(), target, err)
	}
}

// CheckFigures reports f and fails on a failed request or a lost event.
func CheckFigures(t *testing.T, fault string, f LoadFigures) {
	t.Helper()
	t.Logf("%s: %s", fault, f)
	if f.Failed != 0 || f.EventsLost != 0 {
		t.Errorf("%s: %d requests failed after a retry and %d events were lost; want none", fault, f.Failed, f.EventsLost)
	}
	if f.Sent == 0 {
		t.Errorf("%s: no request was made", fault)
	}
}

// IchorAnswers waits until kube-apiserver serves Ichor's API again: its
// discovery, through the aggregator.
func IchorAnswers(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(CP.AdminConfig)
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var code int
		err := cs.Discovery().RESTClient().Get().AbsPath("/apis", v1alpha1.GroupName, "v1alpha1").Do(ctx).StatusCode(&code).Error()
		return err == nil && code == http.StatusOK, nil
	})
}

// LeaseHolder reads who holds lease ns/name, and when it was acquired.
func LeaseHolder(ctx context.Context, t *testing.T, ns, name string) (string, time.Time) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(CP.AdminConfig)
	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return "", time.Time{}
	}
	var at time.Time
	if l.Spec.AcquireTime != nil {
		at = l.Spec.AcquireTime.Time
	}
	return *l.Spec.HolderIdentity, at
}

// ControllerProcess is ichor-controller run as its Deployment runs it: the
// binary, as its ServiceAccount, with leader election.
type ControllerProcess struct {
	Proc    *proc.Process
	Metrics string
}

// StartControllerProcess runs binary as replica name of ichor-controller,
// with demo's tuning as flags.
func StartControllerProcess(t *testing.T, binary, name string, d *DemoCluster) *ControllerProcess {
	t.Helper()
	return StartControllerBinary(t, binary, name,
		"--backup-volume-dir="+d.BackupVolumeDir,
		"--machine-recheck-interval=1s",
		"--machine-health-interval=2s",
		"--machine-contact-timeout=5s",
		"--kubelet-serving-poll-interval=1h",
		"--credential-request-retention="+CredentialRetention.String(),
		"--operation-poll-interval=250ms",
		"--operation-step-timeout="+OperationStepTimeout.String(),
	)
}

// StartControllerBinary runs binary as replica name of ichor-controller:
// as its ServiceAccount, with leader election, serving its metrics over
// TLS, and with flags after those.
func StartControllerBinary(t testing.TB, binary, name string, flags ...string) *ControllerProcess {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := CP.KubeconfigFor(kubeconfig, ControllerUser, ControllerGroups...); err != nil {
		t.Fatal(err)
	}
	c := &ControllerProcess{Metrics: FreeLoopbackAddress(t)}
	p, err := proc.Start(dir, name, binary, append([]string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=true",
		"--leader-election-namespace=" + harness.IchorNamespace,
		"--metrics-bind-address=" + c.Metrics,
		"--metrics-tls-cert-file=" + CP.ControllerUpload.CertFile,
		"--metrics-tls-private-key-file=" + CP.ControllerUpload.KeyFile,
		"--health-probe-bind-address=" + FreeLoopbackAddress(t),
		"--scratch-dir=" + ScratchDir,
	}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	c.Proc = p
	KeepLogsOnFailure(t, dir)
	t.Cleanup(func() { _ = p.Stop(10 * time.Second) })
	return c
}

// Leader election's timing, controller-runtime's defaults that ichor-controller keeps.
const (
	LeaseDuration = 15 * time.Second
)

// ScrapeControllerMetrics reads a controller's /metrics as a ServiceAccount
// bound to ichor-metrics-reader, as Prometheus does.
func ScrapeControllerMetrics(ctx context.Context, t testing.TB, addr string) string {
	t.Helper()
	ns := CP.Namespace(t)
	token := ServiceAccountToken(ctx, t, ns, "prometheus")
	BindClusterRole(ctx, t, ns, "prometheus", "ichor-metrics-reader")
	client := ControllerMetricsClient(t)
	var body string
	var code int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		code, body = GetWithToken(ctx, t, client, "https://"+addr+"/metrics", token)
		return code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("the controller's metrics: %d %s: %v", code, body, err)
	}
	return body
}
