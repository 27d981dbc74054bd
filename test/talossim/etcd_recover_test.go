package talossim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/siderolabs/talos/pkg/machinery/role"
)

// TestTalosctlRecoversKubernetesData follows Talos's disaster-recovery guide with the official talosctl
// against a control plane whose Kubernetes runs for real: `talosctl etcd snapshot` saves the real etcd's
// data (talosctl reads it back as an etcd backend), the node's EPHEMERAL partition is wiped, and
// `talosctl bootstrap --recover-from` brings back exactly the objects of the snapshot, read through the
// cluster's kube-apiserver.
func TestTalosctlRecoversKubernetesData(t *testing.T) {
	t.Parallel()

	bin := talosctl(t)
	cl, k := kubeTestCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), kubeTimeout)
	t.Cleanup(cancel)

	etcd := &EtcdCluster{Name: "recover"}
	n := appliedNode(t, ctx, Options{ListenAddress: "127.0.2.20:0", Hostname: "cp-recover", Kubernetes: k, Etcd: etcd}, cl.cp, PhaseRunning)
	adminCfg := writeTalosconfig(t, n, cl, role.Admin)
	talos := func(dir string, args ...string) talosctlResult {
		return runTalosctl(t, bin, dir, append([]string{"--talosconfig", adminCfg, "--nodes", "127.0.2.20"}, args...)...)
	}

	talos("", "bootstrap").mustSucceed(t)

	endpoint := loadConfig(t, cl.cp).K8sClusterConfig().ClusterEndpoint().String()
	kube := waitKube(t, ctx, k, endpoint)

	configMaps := kube.CoreV1().ConfigMaps(metav1.NamespaceDefault)
	if _, err := configMaps.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"v": "before"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	r := talos(dir, "etcd", "snapshot", "db.snapshot").mustSucceed(t)

	snap, err := os.ReadFile(filepath.Join(dir, "db.snapshot"))
	if err != nil {
		t.Fatal(err)
	}

	st := readSnapshotStatus(t, snap)
	wantLine(t, r, r.stdout, "^"+regexp.QuoteMeta(fmt.Sprintf("snapshot info: hash %08x, revision %d, total keys %d, total size %d",
		st.hash, st.revision, st.totalKeys, st.totalSize))+"$")

	if data, err := parseSnapshotBytes(t, snap, false); err != nil || !data.foreign || data.revision != st.revision {
		t.Fatalf("snapshot of the real etcd read as %+v, %v", data, err)
	}

	// After the snapshot: a change and a new object, which the recovery must not keep.
	if _, err = configMaps.Update(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"v": "after"},
	}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	if _, err = configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Before the data is gone, recovery is refused: etcd still holds it.
	talos(dir, "bootstrap", "--recover-from=db.snapshot").mustFail(t, "etcd data directory is not empty")

	talos("", "reset", "--graceful=false", "--reboot", "--system-labels-to-wipe=EPHEMERAL", "--wait=false").mustSucceed(t)
	pollUntil(t, ctx, "the reset node to run with an empty etcd", func() (bool, error) {
		return n.Phase() == PhaseRunning && !etcd.Bootstrapped(), nil
	})

	talos(dir, "bootstrap", "--recover-from=db.snapshot").mustSucceed(t)

	kube = waitKube(t, ctx, k, endpoint)

	kept, err := kube.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || kept.Data["v"] != "before" {
		t.Fatalf("after recovery kept = %v, %v; want the snapshot's v=before", kept.Data, err)
	}

	if _, err = kube.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "later", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after recovery the object created after the snapshot: %v, want NotFound", err)
	}

	if got := etcd.Revision(); got != st.revision {
		t.Errorf("recovered cluster revision = %d, want the snapshot's %d", got, st.revision)
	}

	if members := etcd.Members(); len(members) != 1 || members[0].Hostname != "cp-recover" {
		t.Errorf("members after recovery = %+v, want cp-recover alone", members)
	}

	// The snapshot was consumed: a second recovery has nothing to use (and etcd holds data again).
	talos("", "bootstrap").mustFail(t, "etcd data directory is not empty")

	// After a recovery the kubelets are restarted, so that none watches from revisions etcd lost.
	r = talos("", "service", "kubelet", "restart").mustSucceed(t)
	wantLine(t, r, r.stdout, `Service "kubelet" restarted`)
	talos("", "service", "nope", "restart").mustFail(t, `service "nope" not defined`)
	waitNode(t, ctx, kube, "cp-recover")
}

// waitKube waits for the control plane at endpoint and returns a client of it.
func waitKube(t *testing.T, ctx context.Context, k *Kubernetes, endpoint string) kubernetes.Interface {
	t.Helper()

	cfg, err := k.WaitReady(ctx, endpoint)
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}

	return kubernetes.NewForConfigOrDie(cfg)
}
