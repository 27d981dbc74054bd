package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// APITestLabel marks every object these tests create with the test's
// namespace, so lists of cluster-scoped kinds can be narrowed to one test.
const APITestLabel = "ichor.dev/api-test"

// APITimeout bounds each test's requests and waits.
const APITimeout = 60 * time.Second

// APIClient is the typed clientset as the control plane's admin, through the aggregator.
func APIClient(t testing.TB) versioned.Interface {
	t.Helper()
	return APIClientFor(t, CP.AdminConfig)
}

// APIClientFor is the typed clientset for cfg.
func APIClientFor(t testing.TB, cfg *rest.Config) versioned.Interface {
	t.Helper()
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	return cs
}

// APIContext is the test's context with apiTimeout.
func APIContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), APITimeout)
	t.Cleanup(cancel)
	return ctx
}

// APIPublicKeyPEM is a fresh Ed25519 public key as a PEM "PUBLIC KEY" block.
func APIPublicKeyPEM(t testing.TB) string {
	t.Helper()
	_, pub := NewCredentialKey(t)
	return pub
}

// APIStatus returns the metav1.Status of an API error, failing the test for any other error.
func APIStatus(t testing.TB, err error) metav1.Status {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("want an API status error, got %T: %v", err, err)
	}
	return status.Status()
}

// APICauseFields lists the field paths of an error's causes, sorted.
func APICauseFields(t testing.TB, err error) []string {
	t.Helper()
	status := APIStatus(t, err)
	if status.Details == nil {
		t.Fatalf("error has no details: %v", err)
	}
	var fields []string
	for _, c := range status.Details.Causes {
		fields = append(fields, c.Field)
	}
	sort.Strings(fields)
	return fields
}

// APINames returns the names of a list's items, sorted.
func APINames(t testing.TB, list runtime.Object) []string {
	t.Helper()
	items, err := meta.ExtractList(list)
	if err != nil {
		t.Fatalf("extract list: %v", err)
	}
	names := make([]string, 0, len(items))
	for _, item := range items {
		m, err := meta.Accessor(item)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, m.GetName())
	}
	sort.Strings(names)
	return names
}

// Fixtures: one valid object of each kind.

func APITalosCluster(name, ns string) *v1alpha1.TalosCluster {
	return &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.13.0",
			KubernetesVersion: "v1.36.0",
			ControlPlane:      v1alpha1.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"},
		},
	}
}

func APITalosMachine(name, ns, cluster string) *v1alpha1.TalosMachine {
	return &v1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.TalosMachineSpec{ClusterName: cluster, Address: NextAPIAddress()},
	}
}

// APIAddresses counts the machines apiTalosMachine made: each gets an
// address of its own in 10.5.0.100-249 (tests that name addresses use
// those below), since a machine that pinned a certificate or was approved
// holds its address against every other (IchorMachineAddresses), and test
// namespaces go away in the background.
var APIAddresses atomic.Int64

func NextAPIAddress() string {
	return fmt.Sprintf("10.5.0.%d:50000", 100+APIAddresses.Add(1)%150)
}

func APITalosConfigPatch(name, ns string) *v1alpha1.TalosConfigPatch {
	return &v1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.TalosConfigPatchSpec{
			ClusterName: "alpha",
			Priority:    1,
			Patch:       "machine:\n  network:\n    hostname: patched\n",
		},
	}
}

func APITalosOperation(name, ns string, typ v1alpha1.OperationType) *v1alpha1.TalosOperation {
	return &v1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.TalosOperationSpec{ClusterName: "alpha", Type: typ},
	}
}

func APITalosCredentialRequest(t testing.TB, name, ns string) *v1alpha1.TalosCredentialRequest {
	return &v1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.TalosCredentialRequestSpec{
			ClusterName: "alpha",
			Purpose:     v1alpha1.PurposeTalosconfigReader,
			PublicKey:   APIPublicKeyPEM(t),
			// The server replaces all three with the caller's identity.
			Username: "mallory",
			UID:      "forged-uid",
			Groups:   []string{"system:masters"},
		},
	}
}

func APIMachineReclaim(name, ns string) *v1alpha1.MachineReclaim {
	return &v1alpha1.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.MachineReclaimSpec{
			ClusterName: "alpha",
			MachineRef:  &v1alpha1.MachineReference{Namespace: "elsewhere", Name: "node-1"},
			Role:        v1alpha1.MachineRoleWorker,
		},
	}
}

func APIIchorUser(name string) *v1alpha1.IchorUser {
	return &v1alpha1.IchorUser{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleViewer, DisplayName: "API Test"},
	}
}

func APIIchorInstallation() *v1alpha1.IchorInstallation {
	return &v1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.InstallationName},
		Spec: v1alpha1.IchorInstallationSpec{
			Version:  "v0.1.0",
			Settings: v1alpha1.InstallationSettings{ProvisioningNetworks: []string{"10.5.0.0/24"}},
		},
	}
}

// GrantRole binds subject to a Role in ns holding only rules, for a test
// that needs rights no shipped role grants by themselves.
func GrantRole(ctx context.Context, t testing.TB, ns, name string, subject rbacv1.Subject, rules ...rbacv1.PolicyRule) {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(CP.AdminConfig)
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// UseProvisioningNetworks makes cidrs the installation's provisioning networks
// for the rest of the test (useSettings).
func UseProvisioningNetworks(ctx context.Context, t testing.TB, cidrs ...string) {
	t.Helper()
	UseSettings(ctx, t, func(s *v1alpha1.InstallationSettings) { s.ProvisioningNetworks = cidrs })
}

// UseUsersEnabled turns sign-in with Ichor users on or off for the rest of
// the test (useSettings).
func UseUsersEnabled(ctx context.Context, t testing.TB, on bool) {
	t.Helper()
	UseSettings(ctx, t, func(s *v1alpha1.InstallationSettings) { s.UsersEnabled = on })
}

// UseSettings changes the installation's settings with change for the rest
// of the test, creating the installation if there is none, and puts back
// what was there when the test ends.
func UseSettings(ctx context.Context, t testing.TB, change func(*v1alpha1.InstallationSettings)) {
	t.Helper()
	installations := APIClient(t).IchorV1alpha1().IchorInstallations()
	in, err := installations.Get(ctx, v1alpha1.InstallationName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		in = APIIchorInstallation()
		change(&in.Spec.Settings)
		if _, err := installations.Create(ctx, in, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create IchorInstallation: %v", err)
		}
		t.Cleanup(func() {
			_ = installations.Delete(context.Background(), v1alpha1.InstallationName, metav1.DeleteOptions{})
		})
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	previous := *in.Spec.Settings.DeepCopy()
	change(&in.Spec.Settings)
	if _, err := installations.UpdateSettings(ctx, in.Name, in, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("change the installation's settings: %v", err)
	}
	t.Cleanup(func() {
		in, err := installations.Get(context.Background(), v1alpha1.InstallationName, metav1.GetOptions{})
		if err != nil {
			return
		}
		in.Spec.Settings = previous
		_, _ = installations.UpdateSettings(context.Background(), in.Name, in, metav1.UpdateOptions{})
	})
}

// AuditEvent is what the tests read of an event in ichor-apiserver's audit log.
type AuditEvent struct {
	Level, Stage, Verb, RequestURI string
	User                           struct{ Username string }
	ObjectRef                      struct{ Resource, Subresource, Name string }
	Annotations                    map[string]string
	// Raw is the event's line as written.
	Raw []byte
}

// AuditEvents reads ichor-apiserver's audit log (artifacts/audit-policy.yaml's policy).
func AuditEvents(t testing.TB) []AuditEvent {
	t.Helper()
	data, err := os.ReadFile(CP.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	var out []AuditEvent
	for _, line := range bytes.Split(data, []byte("\n")) {
		var e AuditEvent
		if json.Unmarshal(line, &e) == nil {
			e.Raw = line
			out = append(out, e)
		}
	}
	return out
}
