package chart

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	ichorclient "ichor.dev/ichor/pkg/generated/clientset/versioned/typed/ichor/v1alpha1"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/integration/itest"
)

// previousRelease is the commit whose chart and images an upgrade starts
// from: the release before this tree. Move it when a release is cut.
const previousRelease = "f196ae4f46c42d7e4620c78c765963360ba2d8dc"

// previousTag is the tag of the previous release's images.
const previousTag = "v0.0.0-previous"

// previousSource is the previous release's tree, checked out once.
func previousSource(ctx context.Context, t *testing.T, root string) string {
	t.Helper()
	dir := filepath.Join(itest.PackageDir, "previous")
	if _, err := os.Stat(dir); err == nil {
		return dir
	}
	for _, args := range [][]string{{"clone", "--quiet", "--shared", "--no-checkout", root, dir}, {"-C", dir, "checkout", "--quiet", previousRelease}} {
		if out, err := exec.CommandContext(ctx, "git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return dir
}

// previousChart is the previous release's chart.
func previousChart(ctx context.Context, t *testing.T, root string) string {
	t.Helper()
	return filepath.Join(previousSource(ctx, t, root), "charts", "ichor")
}

// previousImages are the previous release's images, built from its source
// once per machine: a commit's images never change, so they are kept in
// ~/.cache/ichor/previous-release/<commit>, as the tools are.
func previousImages(ctx context.Context, t *testing.T, root string) string {
	t.Helper()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	cached := filepath.Join(home, ".cache", "ichor", "previous-release", previousRelease)
	if _, err := os.Stat(filepath.Join(cached, "oci", "index.json")); err == nil {
		return filepath.Join(cached, "oci")
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	building, err := os.MkdirTemp(filepath.Dir(cached), previousRelease+".building-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(building) //nolint:errcheck
	if _, err := buildImages(ctx, t, previousSource(ctx, t, root), previousTag, building); err != nil {
		t.Fatal(err)
	}
	archives, _ := filepath.Glob(filepath.Join(building, "*.oci.tar")) // the layout is all a node needs
	for _, a := range archives {
		_ = os.Remove(a)
	}
	if err := os.Rename(building, cached); err != nil && !errors.Is(err, fs.ErrExist) {
		if _, statErr := os.Stat(filepath.Join(cached, "oci", "index.json")); statErr != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(cached, "oci")
}

// TestChartUpgradesFromThePreviousRelease installs the previous release
// (its chart, its images built from its source), builds a cluster through
// it, and puts in place what a team has: a user with a password, a
// config patch, a finished operation. Then `helm upgrade --wait` to this
// tree's chart and images: ichor-apiserver is replaced on the same etcd
// volume, ichor-controller resumes. Every object is still there, unchanged
// (same UID, same spec); the new apiserver reads what the old one wrote
// (the user signs in with the password set before), and the new
// controller acts on it (the cluster stays Ready, a new operation runs).
func TestChartUpgradesFromThePreviousRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	node := startNode(ctx, t, previousImages(ctx, t, root), treeImages(ctx, t, root))
	kube := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)
	api := versioned.NewForConfigOrDie(itest.CP.AdminConfig).IchorV1alpha1()

	const clusters = "team-c"
	applyNamespace(t, ns, true)
	applyNamespace(t, clusters, false)
	if out, err := runHelmWithin(t, 7*time.Minute, nil, append([]string{"install", "ichor", previousChart(ctx, t, root)}, runValues(previousTag, clusters)...)...); err != nil {
		t.Fatalf("install the previous release: %v\n%s", err, out)
	}
	buildCluster(ctx, t, node, clusters, "kept", "127.0.15")

	// What a team has in place.
	const password = "correct horse battery staple"
	if _, err := api.IchorUsers().Create(ctx, &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: "dana"},
		Spec: v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleOperator, DisplayName: "Dana"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.IchorUsers().UpdatePassword(ctx, "dana", &v1alpha1.IchorUserPassword{ObjectMeta: metav1.ObjectMeta{Name: "dana"}, Password: password}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	itest.MustApply(ctx, t, `apiVersion: ichor.dev/v1alpha1
kind: TalosConfigPatch
metadata: {name: somaxconn, namespace: team-c}
spec:
  clusterName: kept
  patch: |
    machine:
      sysctls:
        net.core.somaxconn: "65535"
`)
	runOperation(ctx, t, api, clusters, "defrag-before")
	before := snapshot(ctx, t, api, clusters)

	began := time.Now()
	if out, err := runHelmWithin(t, 7*time.Minute, nil, append([]string{"upgrade", "ichor", chartDir(t)}, runValues(treeTag, clusters)...)...); err != nil {
		t.Fatalf("upgrade to this tree: %v\n%s", err, out)
	}
	t.Logf("helm upgrade --wait: every Deployment replaced and available after %s", time.Since(began).Round(time.Second))
	checkRunning(ctx, t, kube)
	for _, p := range livePods(ctx, t, kube) {
		if image := p.Spec.Containers[0].Image; !strings.HasSuffix(image, ":"+treeTag) {
			t.Errorf("pod %s runs %s after the upgrade", p.Name, image)
		}
	}

	// Nothing lost, nothing changed.
	after := snapshot(ctx, t, api, clusters)
	for key, spec := range before {
		if after[key] != spec {
			t.Errorf("%s after the upgrade:\n%s\nwas:\n%s", key, after[key], spec)
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d objects after the upgrade, %d before", len(after), len(before))
	}
	if _, err := api.IchorUsers().Login(ctx, "dana", &v1alpha1.IchorUserLogin{ObjectMeta: metav1.ObjectMeta{Name: "dana"}, Password: password}, metav1.CreateOptions{}); err != nil {
		t.Errorf("dana signs in with the password set before the upgrade: %v", err)
	}
	if _, err := api.IchorUsers().Login(ctx, "dana", &v1alpha1.IchorUserLogin{ObjectMeta: metav1.ObjectMeta{Name: "dana"}, Password: "not the password"}, metav1.CreateOptions{}); err == nil {
		t.Error("a wrong password was accepted after the upgrade")
	}
	// The controller resumes: the cluster is Ready and a new operation runs.
	itest.WaitCluster(ctx, t, clusters, "kept", v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	runOperation(ctx, t, api, clusters, "defrag-after")

	if out, err := runHelmWithin(t, 3*time.Minute, nil, "uninstall", "ichor", "-n", ns, "--wait", "--timeout=2m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// runOperation creates an etcd defragmentation of cluster kept, starts it
// and waits until it Succeeded.
func runOperation(ctx context.Context, t *testing.T, api ichorclient.IchorV1alpha1Interface, namespace, name string) {
	t.Helper()
	ops := api.TalosOperations(namespace)
	if _, err := ops.Create(ctx, &v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TalosOperationSpec{ClusterName: "kept", Type: v1alpha1.OperationEtcdDefrag}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.Start(ctx, name, &v1alpha1.TalosOperation{}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase v1alpha1.OperationPhase
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		op, err := ops.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = op.Status.Phase
		return phase == v1alpha1.OperationSucceeded || phase == v1alpha1.OperationFailed, nil
	})
	if err != nil || phase != v1alpha1.OperationSucceeded {
		t.Fatalf("operation %s: %s (%v)", name, phase, err)
	}
}

// snapshot is every Ichor object a team made or Ichor keeps for it, by
// kind/namespace/name: its UID and spec (and, for operations, how they
// ended), as JSON.
func snapshot(ctx context.Context, t *testing.T, api ichorclient.IchorV1alpha1Interface, namespace string) map[string]string {
	t.Helper()
	out := map[string]string{}
	add := func(key string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out[key] = string(data)
	}
	type entry struct {
		UID  any
		Spec any
		More any `json:",omitempty"`
	}
	clusters, err := api.TalosClusters(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range clusters.Items {
		add("taloscluster/"+o.Name, entry{o.UID, o.Spec, o.Status.BootstrappedAt})
	}
	machines, err := api.TalosMachines(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range machines.Items {
		add("talosmachine/"+o.Name, entry{o.UID, o.Spec, o.Status.Approval})
	}
	patches, err := api.TalosConfigPatches(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range patches.Items {
		add("talosconfigpatch/"+o.Name, entry{o.UID, o.Spec, nil})
	}
	ops, err := api.TalosOperations(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ops.Items {
		add("talosoperation/"+o.Name, entry{o.UID, o.Spec, []any{o.Status.Phase, o.Status.StartedBy, o.Status.Steps}})
	}
	users, err := api.IchorUsers().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range users.Items {
		add("ichoruser/"+o.Name, entry{o.UID, o.Spec, o.Status.PasswordChangedAt})
	}
	inst, err := api.IchorInstallations().Get(ctx, "ichor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	add("ichorinstallation/ichor", entry{inst.UID, inst.Spec, nil})
	return out
}
