package integration

// Tests of the ichor.dev API itself through the typed clientset, against the
// kube-apiserver's aggregator: create, read, update, status, delete for every
// kind. The other api_*_test.go files cover selectors and pagination, watch,
// server-side apply, dry run, errors and finalizers.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// apiObject is what every ichor.dev kind is.
type apiObject interface {
	runtime.Object
	metav1.Object
}

// apiCRUDClient is the part of every typed client the CRUD test uses.
type apiCRUDClient[T apiObject, L runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
}

// apiCRUDCase describes one kind to apiRunCRUD.
type apiCRUDCase[T apiObject, L runtime.Object] struct {
	namespaced bool
	client     func(cs versioned.Interface, ns string) apiCRUDClient[T, L]
	// fixture returns a valid object; name is used unless the kind fixes it.
	fixture func(t testing.TB, name, ns string) T
	// createAs, if set, is the identity objects are created as.
	createAs *rest.Config
	// afterCreate checks what the server set on create beyond status and generation.
	afterCreate func(t *testing.T, created T)

	// specMark reads the spec field mutateSpec changes.
	specMark   func(T) string
	mutateSpec func(T)
	// immutableSpec kinds refuse any spec change on the main endpoint with
	// 422 on the fields in immutableCauses (default: "spec").
	immutableSpec   bool
	immutableCauses []string

	// statusMark reads the status field setStatus writes; initialStatus is
	// its value after create.
	statusMark    func(T) string
	setStatus     func(T)
	initialStatus string
	writtenStatus string
}

// apiRunCRUD creates, reads, lists, updates, writes the status of, and deletes
// one object of a kind, checking what each endpoint keeps and ignores.
func apiRunCRUD[T apiObject, L runtime.Object](t *testing.T, c apiCRUDCase[T, L]) {
	ctx := apiContext(t)
	testNS := cp.Namespace(t)
	ns := ""
	if c.namespaced {
		ns = testNS
	}
	client := c.client(apiClient(t), ns)
	creator := client
	if c.createAs != nil {
		creator = c.client(apiClientFor(t, c.createAs), ns)
	}

	obj := c.fixture(t, "crud-"+testNS, ns)
	name := obj.GetName()
	obj.SetLabels(map[string]string{apiTestLabel: testNS})
	c.setStatus(obj) // a status sent on create is dropped
	originalSpec := c.specMark(obj)

	created, err := creator.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		// Cluster-scoped objects outlive the namespace; remove them whatever happened.
		if err := client.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete %s: %v", name, err)
		}
	})
	if created.GetName() != name || created.GetNamespace() != ns {
		t.Errorf("created %s/%s, want %s/%s", created.GetNamespace(), created.GetName(), ns, name)
	}
	if created.GetUID() == "" || created.GetResourceVersion() == "" || created.GetCreationTimestamp().Time.IsZero() {
		t.Errorf("created object lacks uid, resourceVersion or creationTimestamp: %+v", created)
	}
	if got := created.GetGeneration(); got != 1 {
		t.Errorf("generation after create = %d, want 1", got)
	}
	if got := c.statusMark(created); got != c.initialStatus {
		t.Errorf("status after create = %q, want %q (a status sent on create must be dropped)", got, c.initialStatus)
	}
	if got := c.specMark(created); got != originalSpec {
		t.Errorf("spec after create = %q, want %q", got, originalSpec)
	}
	if c.afterCreate != nil {
		c.afterCreate(t, created)
	}

	got, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.GetUID() != created.GetUID() || got.GetResourceVersion() != created.GetResourceVersion() {
		t.Errorf("get returned uid %s rv %s, want %s %s", got.GetUID(), got.GetResourceVersion(), created.GetUID(), created.GetResourceVersion())
	}
	if c.statusMark(got) != c.initialStatus || c.specMark(got) != originalSpec {
		t.Errorf("get: status %q spec %q, want %q %q", c.statusMark(got), c.specMark(got), c.initialStatus, originalSpec)
	}

	list, err := client.List(ctx, metav1.ListOptions{LabelSelector: apiTestLabel + "=" + testNS})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if names := apiNames(t, list); !slices.Equal(names, []string{name}) {
		t.Errorf("list by label = %v, want [%s]", names, name)
	}

	// Update on the main endpoint: the spec changes, a status sent along is ignored.
	toUpdate := got.DeepCopyObject().(T)
	c.mutateSpec(toUpdate)
	c.setStatus(toUpdate)
	changedSpec := c.specMark(toUpdate)
	if changedSpec == originalSpec {
		t.Fatalf("mutateSpec left the spec mark at %q", changedSpec)
	}
	var updated T
	if c.immutableSpec {
		_, err := client.Update(ctx, toUpdate, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("spec change of an immutable spec: want 422 Invalid, got %v", err)
		}
		wantCauses := c.immutableCauses
		if wantCauses == nil {
			wantCauses = []string{"spec"}
		}
		if fields := apiCauseFields(t, err); !slices.Equal(fields, wantCauses) {
			t.Errorf("immutable spec error causes = %v, want %v", fields, wantCauses)
		}
		// A metadata-only update goes through and leaves the generation alone.
		toUpdate = got.DeepCopyObject().(T)
		toUpdate.SetLabels(map[string]string{apiTestLabel: testNS, "extra": "yes"})
		c.setStatus(toUpdate)
		if updated, err = client.Update(ctx, toUpdate, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("metadata update: %v", err)
		}
		if g := updated.GetGeneration(); g != 1 {
			t.Errorf("generation after metadata-only update = %d, want 1", g)
		}
		if l := updated.GetLabels()["extra"]; l != "yes" {
			t.Errorf("label after update = %q, want yes", l)
		}
		changedSpec = originalSpec
	} else {
		if updated, err = client.Update(ctx, toUpdate, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update: %v", err)
		}
		if g := updated.GetGeneration(); g != 2 {
			t.Errorf("generation after spec change = %d, want 2", g)
		}
	}
	if m := c.specMark(updated); m != changedSpec {
		t.Errorf("spec after update = %q, want %q", m, changedSpec)
	}
	if m := c.statusMark(updated); m != c.initialStatus {
		t.Errorf("status after main-endpoint update = %q, want %q (ignored)", m, c.initialStatus)
	}
	if updated.GetResourceVersion() == got.GetResourceVersion() {
		t.Errorf("resourceVersion unchanged by update: %s", updated.GetResourceVersion())
	}
	wantGeneration := updated.GetGeneration()

	// UpdateStatus: the status is written, a spec change sent along is ignored.
	toStatus := updated.DeepCopyObject().(T)
	c.setStatus(toStatus)
	c.mutateSpec(toStatus)
	if c.specMark(toStatus) == changedSpec {
		t.Fatalf("second mutateSpec left the spec mark at %q", changedSpec)
	}
	statused, err := client.UpdateStatus(ctx, toStatus, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	if m := c.statusMark(statused); m != c.writtenStatus {
		t.Errorf("status after UpdateStatus = %q, want %q", m, c.writtenStatus)
	}
	if m := c.specMark(statused); m != changedSpec {
		t.Errorf("spec after UpdateStatus = %q, want %q (a spec sent to /status is ignored)", m, changedSpec)
	}
	if g := statused.GetGeneration(); g != wantGeneration {
		t.Errorf("generation after UpdateStatus = %d, want %d", g, wantGeneration)
	}
	reread, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get after status update: %v", err)
	}
	if c.statusMark(reread) != c.writtenStatus || c.specMark(reread) != changedSpec || reread.GetGeneration() != wantGeneration {
		t.Errorf("stored after UpdateStatus: status %q spec %q generation %d, want %q %q %d",
			c.statusMark(reread), c.specMark(reread), reread.GetGeneration(), c.writtenStatus, changedSpec, wantGeneration)
	}

	if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := client.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: want NotFound, got %v", err)
	}
}

// apiCounter makes mutateSpec give a new value each call.
type apiCounter int

func (c *apiCounter) next() int { *c++; return int(*c) }

func TestAPICRUDEveryKind(t *testing.T) {
	alice := cp.ConfigFor("alice", "ichor:admin")
	cases := []struct {
		kind string
		run  func(t *testing.T)
	}{
		{"TalosCluster", func(t *testing.T) {
			var n apiCounter
			apiRunCRUD(t, apiCRUDCase[*v1alpha1.TalosCluster, *v1alpha1.TalosClusterList]{
				namespaced: true,
				client: func(cs versioned.Interface, ns string) apiCRUDClient[*v1alpha1.TalosCluster, *v1alpha1.TalosClusterList] {
					return cs.IchorV1alpha1().TalosClusters(ns)
				},
				fixture:       func(_ testing.TB, name, ns string) *v1alpha1.TalosCluster { return apiTalosCluster(name, ns) },
				specMark:      func(o *v1alpha1.TalosCluster) string { return o.Spec.KubernetesVersion },
				mutateSpec:    func(o *v1alpha1.TalosCluster) { o.Spec.KubernetesVersion = fmt.Sprintf("v1.37.%d", 2+n.next()) },
				statusMark:    func(o *v1alpha1.TalosCluster) string { return string(o.Status.Phase) },
				setStatus:     func(o *v1alpha1.TalosCluster) { o.Status.Phase = v1alpha1.ClusterPhaseReady },
				writtenStatus: "Ready",
			})
		}},
		{"TalosMachine", func(t *testing.T) {
			var n apiCounter
			apiRunCRUD(t, apiCRUDCase[*v1alpha1.TalosMachine, *v1alpha1.TalosMachineList]{
				namespaced: true,
				client: func(cs versioned.Interface, ns string) apiCRUDClient[*v1alpha1.TalosMachine, *v1alpha1.TalosMachineList] {
					return cs.IchorV1alpha1().TalosMachines(ns)
				},
				fixture: func(_ testing.TB, name, ns string) *v1alpha1.TalosMachine { return apiTalosMachine(name, ns, "alpha") },
				afterCreate: func(t *testing.T, m *v1alpha1.TalosMachine) {
					if m.Spec.Role != v1alpha1.MachineRoleWorker {
						t.Errorf("role of an assigned machine defaults to worker, got %q", m.Spec.Role)
					}
				},
				specMark:      func(o *v1alpha1.TalosMachine) string { return o.Spec.Hostname },
				mutateSpec:    func(o *v1alpha1.TalosMachine) { o.Spec.Hostname = fmt.Sprintf("node-%d", n.next()) },
				statusMark:    func(o *v1alpha1.TalosMachine) string { return string(o.Status.Phase) },
				setStatus:     func(o *v1alpha1.TalosMachine) { o.Status.Phase = v1alpha1.MachinePhaseReady },
				writtenStatus: "Ready",
			})
		}},
		{"TalosConfigPatch", func(t *testing.T) {
			var n apiCounter
			apiRunCRUD(t, apiCRUDCase[*v1alpha1.TalosConfigPatch, *v1alpha1.TalosConfigPatchList]{
				namespaced: true,
				client: func(cs versioned.Interface, ns string) apiCRUDClient[*v1alpha1.TalosConfigPatch, *v1alpha1.TalosConfigPatchList] {
					return cs.IchorV1alpha1().TalosConfigPatches(ns)
				},
				fixture:       func(_ testing.TB, name, ns string) *v1alpha1.TalosConfigPatch { return apiTalosConfigPatch(name, ns) },
				specMark:      func(o *v1alpha1.TalosConfigPatch) string { return fmt.Sprint(o.Spec.Priority) },
				mutateSpec:    func(o *v1alpha1.TalosConfigPatch) { o.Spec.Priority = int32(10 + n.next()) },
				statusMark:    func(o *v1alpha1.TalosConfigPatch) string { return string(o.Status.Effect) },
				setStatus:     func(o *v1alpha1.TalosConfigPatch) { o.Status.Effect = v1alpha1.ConfigEffectNoReboot },
				writtenStatus: "NoReboot",
			})
		}},
		{"TalosOperation", func(t *testing.T) {
			apiRunCRUD(t, apiCRUDCase[*v1alpha1.TalosOperation, *v1alpha1.TalosOperationList]{
				namespaced: true,
				client: func(cs versioned.Interface, ns string) apiCRUDClient[*v1alpha1.TalosOperation, *v1alpha1.TalosOperationList] {
					return cs.IchorV1alpha1().TalosOperations(ns)
				},
				fixture: func(_ testing.TB, name, ns string) *v1alpha1.TalosOperation {
					return apiTalosOperation(name, ns, v1alpha1.OperationReboot)
				},
				specMark:      func(o *v1alpha1.TalosOperation) string { return string(o.Spec.Type) },
				mutateSpec:    func(o *v1alpha1.TalosOperation) { o.Spec.Type = apiToggle(o.Spec.Type, "reboot", "etcd-defrag") },
				immutableSpec: true,
				statusMark:    func(o *v1alpha1.TalosOperation) string { return string(o.Status.Phase) },
				setStatus:     func(o *v1alpha1.TalosOperation) { o.Status.Phase = v1alpha1.OperationRunning },
				initialStatus: "Pending",
				writtenStatus: "Running",
			})
		}},
		{"TalosCredentialRequest", func(t *testing.T) {
			apiRunCRUD(t, apiCRUDCase[*v1alpha1.TalosCredentialRequest, *v1alpha1.TalosCredentialRequestList]{
				namespaced: true,
				client: func(cs versioned.Interface, ns string) apiCRUDClient[*v1alpha1.TalosCredentialRequest, *v1alpha1.TalosCredentialRequestList] {
					return cs.IchorV1alpha1().TalosCredentialRequests(ns)
				},
				fixture:  apiTalosCredentialRequest,
				createAs: alice,
				afterCreate: func(t *testing.T, r *v1alpha1.TalosCredentialRequest) {
					if r.Spec.Username != "alice" {
						t.Errorf("spec.username = %q, want the caller alice (the body said mallory)", r.Spec.Username)
					}
					if r.Spec.UID != "" {
						t.Errorf("spec.uid = %q, want empty: the caller has no uid and the body's is discarded", r.Spec.UID)
					}
					groups := slices.Sorted(slices.Values(r.Spec.Groups))
					if want := []string{"ichor:admin", "system:authenticated"}; !slices.Equal(groups, want) {
						t.Errorf("spec.groups = %v, want the caller's %v", groups, want)
					}
				},
				specMark: func(o *v1alpha1.TalosCredentialRequest) string { return string(o.Spec.Purpose) },
				mutateSpec: func(o *v1alpha1.TalosCredentialRequest) {
					o.Spec.Purpose = apiToggle(o.Spec.Purpose, "talosconfig-reader", "support-bundle")
				},
				immutableSpec: true,
				statusMark:    func(o *v1alpha1.TalosCredentialRequest) string { return o.Status.Role },
				setStatus:     func(o *v1alpha1.TalosCredentialRequest) { o.Status.Role = "os:reader" },
				writtenStatus: "os:reader",
			})
		}},
		{"MachineReclaim", func(t *testing.T) {
			apiRunCRUD(t, apiCRUDCase[*v1alpha1.MachineReclaim, *v1alpha1.MachineReclaimList]{
				namespaced: true,
				client: func(cs versioned.Interface, ns string) apiCRUDClient[*v1alpha1.MachineReclaim, *v1alpha1.MachineReclaimList] {
					return cs.IchorV1alpha1().MachineReclaims(ns)
				},
				fixture: func(_ testing.TB, name, ns string) *v1alpha1.MachineReclaim { return apiMachineReclaim(name, ns) },
				afterCreate: func(t *testing.T, r *v1alpha1.MachineReclaim) {
					if r.Spec.Role != v1alpha1.MachineRoleWorker || r.Spec.Graceful != nil || r.Spec.Wipe != "" {
						t.Errorf("reclaim defaults: role %q graceful %v wipe %q, want worker and no reset options for a managed machine",
							r.Spec.Role, r.Spec.Graceful, r.Spec.Wipe)
					}
				},
				specMark:      func(o *v1alpha1.MachineReclaim) string { return string(o.Spec.Role) },
				mutateSpec:    func(o *v1alpha1.MachineReclaim) { o.Spec.Role = apiToggle(o.Spec.Role, "worker", "controlplane") },
				immutableSpec: true,
				statusMark:    func(o *v1alpha1.MachineReclaim) string { return string(o.Status.Phase) },
				setStatus:     func(o *v1alpha1.MachineReclaim) { o.Status.Phase = v1alpha1.ReclaimResetting },
				initialStatus: "Pending",
				writtenStatus: "Resetting",
			})
		}},
		{"IchorUser", func(t *testing.T) {
			var n apiCounter
			apiRunCRUD(t, apiCRUDCase[*v1alpha1.IchorUser, *v1alpha1.IchorUserList]{
				client: func(cs versioned.Interface, _ string) apiCRUDClient[*v1alpha1.IchorUser, *v1alpha1.IchorUserList] {
					return cs.IchorV1alpha1().IchorUsers()
				},
				fixture:    func(_ testing.TB, name, _ string) *v1alpha1.IchorUser { return apiIchorUser(name) },
				specMark:   func(o *v1alpha1.IchorUser) string { return o.Spec.DisplayName },
				mutateSpec: func(o *v1alpha1.IchorUser) { o.Spec.DisplayName = fmt.Sprintf("Renamed %d", n.next()) },
				// passwordSet belongs to the password subresource and
				// lastLoginAt to the login one; conditions to /status.
				statusMark: func(o *v1alpha1.IchorUser) string {
					if len(o.Status.Conditions) == 0 {
						return "none"
					}
					return o.Status.Conditions[0].Reason
				},
				setStatus: func(o *v1alpha1.IchorUser) {
					o.Status.Conditions = []metav1.Condition{{Type: "Reviewed", Status: metav1.ConditionTrue, Reason: "Audited",
						LastTransitionTime: metav1.Unix(1767225600, 0)}}
				},
				initialStatus: "none",
				writtenStatus: "Audited",
			})
		}},
		{"IchorInstallation", func(t *testing.T) {
			var n apiCounter
			apiRunCRUD(t, apiCRUDCase[*v1alpha1.IchorInstallation, *v1alpha1.IchorInstallationList]{
				client: func(cs versioned.Interface, _ string) apiCRUDClient[*v1alpha1.IchorInstallation, *v1alpha1.IchorInstallationList] {
					return cs.IchorV1alpha1().IchorInstallations()
				},
				fixture: func(_ testing.TB, _, _ string) *v1alpha1.IchorInstallation { return apiIchorInstallation() },
				afterCreate: func(t *testing.T, in *v1alpha1.IchorInstallation) {
					if in.Name != "ichor" {
						t.Errorf("installation name = %q, want ichor", in.Name)
					}
					if d := in.Spec.Settings.ScanInterval; d == nil || d.Duration != 5*time.Minute {
						t.Errorf("scanInterval = %v, want the 5m default", d)
					}
				},
				specMark:   func(o *v1alpha1.IchorInstallation) string { return o.Spec.Version },
				mutateSpec: func(o *v1alpha1.IchorInstallation) { o.Spec.Version = fmt.Sprintf("v0.%d.0", 1+n.next()) },
				// Version and settings, the whole spec, change only through their subresources.
				immutableSpec:   true,
				immutableCauses: []string{"spec.version"},
				statusMark: func(o *v1alpha1.IchorInstallation) string {
					if len(o.Status.Components) == 0 {
						return ""
					}
					return o.Status.Components[0].Name + "@" + o.Status.Components[0].Version
				},
				setStatus: func(o *v1alpha1.IchorInstallation) {
					o.Status.Components = []v1alpha1.ComponentVersion{{Name: "ichor-apiserver", Version: "v0.1.0"}}
				},
				writtenStatus: "ichor-apiserver@v0.1.0",
			})
		}},
	}
	for _, c := range cases {
		t.Run(c.kind, c.run)
	}
}

// apiToggle returns b when v is a, and a otherwise.
func apiToggle[T ~string](v T, a, b T) T {
	if v == a {
		return b
	}
	return a
}
