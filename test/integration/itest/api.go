package itest

import (
	"context"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// APIObject is what every ichor.dev kind is.
type APIObject interface {
	runtime.Object
	metav1.Object
}

// APICRUDClient is the part of every typed client the CRUD test uses.
type APICRUDClient[T APIObject, L runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
}

// APICRUDCase describes one kind to apiRunCRUD.
type APICRUDCase[T APIObject, L runtime.Object] struct {
	Namespaced bool
	Client     func(cs versioned.Interface, ns string) APICRUDClient[T, L]
	// Fixture returns a valid object; name is used unless the kind fixes it.
	Fixture func(t testing.TB, name, ns string) T
	// createAs, if set, is the identity objects are created as.
	CreateAs *rest.Config
	// AfterCreate checks what the server set on create beyond status and generation.
	AfterCreate func(t *testing.T, created T)

	// SpecMark reads the spec field mutateSpec changes.
	SpecMark   func(T) string
	MutateSpec func(T)
	// ImmutableSpec kinds refuse any spec change on the main endpoint with
	// 422 on the fields in immutableCauses (default: "spec").
	ImmutableSpec   bool
	ImmutableCauses []string

	// StatusMark reads the status field setStatus writes; initialStatus is
	// its value after create.
	StatusMark    func(T) string
	SetStatus     func(T)
	InitialStatus string
	WrittenStatus string
}

// APIRunCRUD creates, reads, lists, updates, writes the status of, and deletes
// one object of a kind, checking what each endpoint keeps and ignores.
func APIRunCRUD[T APIObject, L runtime.Object](t *testing.T, c APICRUDCase[T, L]) {
	ctx := APIContext(t)
	testNS := CP.Namespace(t)
	ns := ""
	if c.Namespaced {
		ns = testNS
	}
	client := c.Client(APIClient(t), ns)
	creator := client
	if c.CreateAs != nil {
		creator = c.Client(APIClientFor(t, c.CreateAs), ns)
	}

	obj := c.Fixture(t, "crud-"+testNS, ns)
	name := obj.GetName()
	obj.SetLabels(map[string]string{APITestLabel: testNS})
	c.SetStatus(obj) // a status sent on create is dropped
	originalSpec := c.SpecMark(obj)

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
	if got := c.StatusMark(created); got != c.InitialStatus {
		t.Errorf("status after create = %q, want %q (a status sent on create must be dropped)", got, c.InitialStatus)
	}
	if got := c.SpecMark(created); got != originalSpec {
		t.Errorf("spec after create = %q, want %q", got, originalSpec)
	}
	if c.AfterCreate != nil {
		c.AfterCreate(t, created)
	}

	got, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.GetUID() != created.GetUID() || got.GetResourceVersion() != created.GetResourceVersion() {
		t.Errorf("get returned uid %s rv %s, want %s %s", got.GetUID(), got.GetResourceVersion(), created.GetUID(), created.GetResourceVersion())
	}
	if c.StatusMark(got) != c.InitialStatus || c.SpecMark(got) != originalSpec {
		t.Errorf("get: status %q spec %q, want %q %q", c.StatusMark(got), c.SpecMark(got), c.InitialStatus, originalSpec)
	}

	list, err := client.List(ctx, metav1.ListOptions{LabelSelector: APITestLabel + "=" + testNS})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if names := APINames(t, list); !slices.Equal(names, []string{name}) {
		t.Errorf("list by label = %v, want [%s]", names, name)
	}

	// Update on the main endpoint: the spec changes, a status sent along is ignored.
	toUpdate := got.DeepCopyObject().(T)
	c.MutateSpec(toUpdate)
	c.SetStatus(toUpdate)
	changedSpec := c.SpecMark(toUpdate)
	if changedSpec == originalSpec {
		t.Fatalf("mutateSpec left the spec mark at %q", changedSpec)
	}
	var updated T
	if c.ImmutableSpec {
		_, err := client.Update(ctx, toUpdate, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("spec change of an immutable spec: want 422 Invalid, got %v", err)
		}
		wantCauses := c.ImmutableCauses
		if wantCauses == nil {
			wantCauses = []string{"spec"}
		}
		if fields := APICauseFields(t, err); !slices.Equal(fields, wantCauses) {
			t.Errorf("immutable spec error causes = %v, want %v", fields, wantCauses)
		}
		// A metadata-only update goes through and leaves the generation alone.
		toUpdate = got.DeepCopyObject().(T)
		toUpdate.SetLabels(map[string]string{APITestLabel: testNS, "extra": "yes"})
		c.SetStatus(toUpdate)
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
	if m := c.SpecMark(updated); m != changedSpec {
		t.Errorf("spec after update = %q, want %q", m, changedSpec)
	}
	if m := c.StatusMark(updated); m != c.InitialStatus {
		t.Errorf("status after main-endpoint update = %q, want %q (ignored)", m, c.InitialStatus)
	}
	if updated.GetResourceVersion() == got.GetResourceVersion() {
		t.Errorf("resourceVersion unchanged by update: %s", updated.GetResourceVersion())
	}
	wantGeneration := updated.GetGeneration()

	// UpdateStatus: the status is written, a spec change sent along is ignored.
	toStatus := updated.DeepCopyObject().(T)
	c.SetStatus(toStatus)
	c.MutateSpec(toStatus)
	if c.SpecMark(toStatus) == changedSpec {
		t.Fatalf("second mutateSpec left the spec mark at %q", changedSpec)
	}
	statused, err := client.UpdateStatus(ctx, toStatus, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	if m := c.StatusMark(statused); m != c.WrittenStatus {
		t.Errorf("status after UpdateStatus = %q, want %q", m, c.WrittenStatus)
	}
	if m := c.SpecMark(statused); m != changedSpec {
		t.Errorf("spec after UpdateStatus = %q, want %q (a spec sent to /status is ignored)", m, changedSpec)
	}
	if g := statused.GetGeneration(); g != wantGeneration {
		t.Errorf("generation after UpdateStatus = %d, want %d", g, wantGeneration)
	}
	reread, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get after status update: %v", err)
	}
	if c.StatusMark(reread) != c.WrittenStatus || c.SpecMark(reread) != changedSpec || reread.GetGeneration() != wantGeneration {
		t.Errorf("stored after UpdateStatus: status %q spec %q generation %d, want %q %q %d",
			c.StatusMark(reread), c.SpecMark(reread), reread.GetGeneration(), c.WrittenStatus, changedSpec, wantGeneration)
	}

	if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := client.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: want NotFound, got %v", err)
	}
}

// APICounter makes mutateSpec give a new value each call.
type APICounter int

func (c *APICounter) Next() int { *c++; return int(*c) }

// APIToggle returns b when v is a, and a otherwise.
func APIToggle[T ~string](v T, a, b T) T {
	if v == a {
		return b
	}
	return a
}
