package itest

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/pkg/controller/clustersecrets"
	"ichor.dev/ichor/test/harness"
)

// The controller's ServiceAccount, as artifacts/controller-rbac.yaml names it.
const (
	ControllerSA     = "ichor-controller"
	ControllerUser   = "system:serviceaccount:" + harness.IchorNamespace + ":" + ControllerSA
	ControllerWait   = 90 * time.Second
	ControllerPoll   = 200 * time.Millisecond
	ControllerRBAC   = "controller-rbac.yaml"
	ControllerFields = "ichor-controller-test"
)

// ControllerGroups are the groups a token of that ServiceAccount carries.
var ControllerGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + harness.IchorNamespace}

// InstallControllerRBAC applies artifacts/controller-rbac.yaml for real, as
// an installation would; applying it again changes nothing.
func InstallControllerRBAC(ctx context.Context, t testing.TB) {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CP.Kubectl(ctx, "apply", "--server-side", "--field-manager="+ControllerFields,
		"-f", filepath.Join(root, "artifacts", ControllerRBAC)); err != nil {
		t.Fatal(err)
	}
}

// BindControllerSecrets lets ichor-controller read and create Secrets in
// ns, as an admin does for each namespace that holds TalosClusters.
func BindControllerSecrets(ctx context.Context, t testing.TB, ns string) {
	t.Helper()
	MustApply(ctx, t, fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ichor-controller-secrets, namespace: %s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %s}
subjects: [{kind: ServiceAccount, name: %s, namespace: ichor-system}]
`, ns, clustersecrets.SecretsClusterRole, ControllerSA))
}

// SyncBuffer collects the controller's log lines for the test to search.
type SyncBuffer struct {
	Mu  sync.Mutex
	Buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.Buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.Buf.String()
}

// controllerLog is everything the in-process controllers logged; set once,
// as controller-runtime's logger is process-wide.
var (
	ControllerLog     SyncBuffer
	ControllerLogOnce sync.Once
)

// StartController runs ichor-controller's manager in this process, from
// its real options, as its ServiceAccount (impersonated, so kube-apiserver
// and ichor-apiserver authorize every request against the artifacts' RBAC),
// and stops it when the test ends. It returns the address of its health probes.
func StartController(t testing.TB, tune func(*ctrlcmd.Options)) string {
	t.Helper()
	return RunController(t, tune).Probes
}

// RunningController is an in-process controller manager.
type RunningController struct {
	Probes string
	Stop   func()
}

// RunController is startController for a test that also stops the
// controller itself (stop waits for the manager to end; calling it again
// does nothing).
func RunController(t testing.TB, tune func(*ctrlcmd.Options)) *RunningController {
	t.Helper()
	return RunControllerWith(t, tune, nil)
}

// RunControllerWith is runController whose requests to the management
// cluster go through wrap (for faults), when it is not nil.
func RunControllerWith(t testing.TB, tune func(*ctrlcmd.Options), wrap func(http.RoundTripper) http.RoundTripper) *RunningController {
	t.Helper()
	ControllerLogOnce.Do(func() {
		ctrl.SetLogger(zap.New(zap.WriteTo(&ControllerLog), zap.Level(zapcore.DebugLevel)))
	})
	probes := FreeLoopbackAddress(t)
	o := ctrlcmd.NewOptions()
	o.MetricsBindAddress = "0"
	o.HealthProbeBindAddress = probes
	o.SkipControllerNameValidation = true // one manager per test, in one process
	o.ScratchDir = ScratchDir
	tune(o)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg := CP.ConfigFor(ControllerUser, ControllerGroups...)
	if wrap != nil {
		cfg.Wrap(wrap)
	}
	mgr, err := o.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("controller manager: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("controller manager still running 30s after it was stopped")
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			LogControllerTail(t)
		}
	})
	return &RunningController{Probes: probes, Stop: stop}
}

// ControllerLogTail is how many of the controller log's last lines a failed
// test prints; the whole log goes to a file, so that the test's own failure
// messages stay near the end of the output.
const ControllerLogTail = 40

// LogControllerTail writes the controller log to
// $TMPDIR/ichor-test-logs/<test>.controller.log and prints its path and tail.
func LogControllerTail(t testing.TB) {
	all := ControllerLog.String()
	dir := filepath.Join(os.TempDir(), "ichor-test-logs")
	path := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".controller.log")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Logf("controller log not kept: %v", err)
	} else if err := os.WriteFile(path, []byte(all), 0o600); err != nil {
		t.Logf("controller log not kept: %v", err)
	}
	lines := strings.Split(strings.TrimRight(all, "\n"), "\n")
	t.Logf("controller log in %s; its last %d lines:\n%s", path, ControllerLogTail,
		strings.Join(lines[max(0, len(lines)-ControllerLogTail):], "\n"))
}

// KeepLogsOnFailure copies, when t fails, the logs under dir (a managed
// cluster's kube-apiserver, controller manager, etcd) and this process's
// klog output (ichor-apiserver and the simulated kubelets) to
// $TMPDIR/ichor-test-logs/<test>/, so that a failure in CI can be read
// after the temporary directories are gone. Register it after dir's own
// cleanup, so that it runs first.
func KeepLogsOnFailure(t testing.TB, dir string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		out := filepath.Join(os.TempDir(), "ichor-test-logs", strings.ReplaceAll(t.Name(), "/", "_"))
		var kept []string
		copyLog := func(from, name string) {
			data, err := os.ReadFile(from)
			if err != nil {
				return
			}
			to := filepath.Join(out, name)
			if err := os.MkdirAll(filepath.Dir(to), 0o700); err == nil && os.WriteFile(to, data, 0o600) == nil {
				kept = append(kept, name)
			}
		}
		_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() && strings.HasSuffix(path, ".log") {
				rel, _ := filepath.Rel(dir, path)
				copyLog(path, rel)
			}
			return nil
		})
		copyLog(filepath.Join(CP.Dir, "ichor-apiserver.log"), "process.klog.log")
		t.Logf("logs kept in %s: %s", out, strings.Join(kept, ", "))
	})
}

// FreeLoopbackAddress is a 127.0.0.1 port nothing listens on.
func FreeLoopbackAddress(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// WaitHTTP polls url until it answers 200.
func WaitHTTP(ctx context.Context, t testing.TB, url string) {
	t.Helper()
	WaitHTTPWith(ctx, t, http.DefaultClient, url)
}

// WaitHTTPWith is waitHTTP with client.
func WaitHTTPWith(ctx context.Context, t testing.TB, client *http.Client, url string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		_ = resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %s)", url, err, last)
	}
}

// WaitMachine polls a TalosMachine until done accepts it, and returns it.
func WaitMachine(ctx context.Context, t testing.TB, ns, name, what string, done func(*v1alpha1.TalosMachine) bool) *v1alpha1.TalosMachine {
	t.Helper()
	return WaitMachineFor(ctx, t, ns, name, ControllerWait, what, done)
}

// WaitMachineFor is waitMachine with its own deadline.
func WaitMachineFor(ctx context.Context, t testing.TB, ns, name string, within time.Duration, what string, done func(*v1alpha1.TalosMachine) bool) *v1alpha1.TalosMachine {
	t.Helper()
	client := APIClient(t).IchorV1alpha1().TalosMachines(ns)
	var last *v1alpha1.TalosMachine
	err := wait.PollUntilContextTimeout(ctx, ControllerPoll, within, true, func(ctx context.Context) (bool, error) {
		m, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = m
		return done(m), nil
	})
	if err != nil {
		t.Fatalf("TalosMachine %s/%s: waiting until %s: %v\nlast status: %+v", ns, name, what, err, DescribeStatus(last))
	}
	return last
}

// WaitCluster polls a TalosCluster until its condition has status and reason.
func WaitCluster(ctx context.Context, t testing.TB, ns, name, condType string, status metav1.ConditionStatus, reason string) *v1alpha1.TalosCluster {
	t.Helper()
	return WaitClusterFor(ctx, t, ns, name, ControllerWait, condType, status, reason)
}

// HasCondition is true when m's condition condType has status and reason.
func HasCondition(conds []metav1.Condition, condType string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(conds, condType)
	return c != nil && c.Status == status && c.Reason == reason
}

func DescribeStatus(m *v1alpha1.TalosMachine) string {
	if m == nil {
		return "<never read>"
	}
	return fmt.Sprintf("phase=%s maintenance=%+v conditions=%+v", m.Status.Phase, m.Status.Maintenance, m.Status.Conditions)
}

// WaitEvent waits for an Event of type and reason on the object named name.
func WaitEvent(ctx context.Context, t testing.TB, ns, name, eventType string, reason v1alpha1.EventReason) corev1.Event {
	t.Helper()
	return WaitEventMatching(ctx, t, ns, name, eventType, reason, "")
}

// WaitEventSaying waits for an Event of type and reason on the object named
// name whose message contains text.
func WaitEventSaying(ctx context.Context, t testing.TB, ns, name, eventType string, reason v1alpha1.EventReason, text string) {
	t.Helper()
	WaitEventMatching(ctx, t, ns, name, eventType, reason, text)
}

// WaitEventMatching waits for an Event of type and reason on the object
// named name whose message contains text (any message when text is empty).
func WaitEventMatching(ctx context.Context, t testing.TB, ns, name, eventType string, reason v1alpha1.EventReason, text string) corev1.Event {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(CP.AdminConfig)
	var found corev1.Event
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, ControllerPoll, ControllerWait, true, func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range list.Items {
			if e.InvolvedObject.Name != name {
				continue
			}
			seen = append(seen, e.Type+"/"+e.Reason+": "+e.Message)
			if e.Type == eventType && e.Reason == string(reason) && strings.Contains(e.Message, text) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event %s saying %q for %s/%s: %v; seen %q", eventType, reason, text, ns, name, err, seen)
	}
	return found
}

// EventsText is every Event message in ns, for searching.
func EventsText(ctx context.Context, t testing.TB, ns string) string {
	t.Helper()
	list, err := kubernetes.NewForConfigOrDie(CP.AdminConfig).CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, e := range list.Items {
		b.WriteString(e.Reason + ": " + e.Message + "\n")
	}
	return b.String()
}
