package customverbs

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
)

// TestOperationDelete: deleting an operation someone started that has not
// ended needs start on its type, by name or in a collection; one nobody
// started, or one that ended, asks nothing.
func TestOperationDelete(t *testing.T) {
	operations := ichor.Resource("talosoperations").WithVersion("v1alpha1")
	gvk := operations.GroupVersion().WithKind("TalosOperation")
	startedAt := metav1.Date(2026, 5, 1, 12, 0, 0, 0, metav1.Now().Location())
	op := func(phase ichor.OperationPhase, started bool) *ichor.TalosOperation {
		o := &ichor.TalosOperation{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "rotate"},
			Spec: ichor.TalosOperationSpec{ClusterName: "alpha", Type: ichor.OperationCARotation}, Status: ichor.TalosOperationStatus{Phase: phase}}
		if started {
			o.Status.StartedBy, o.Status.StartedAt = "carol", &startedAt
		}
		return o
	}
	for _, tc := range []struct {
		name       string
		old        runtime.Object
		collection bool
		allow      bool
		wantErr    string // "" asks nothing
	}{
		{name: "pending, nobody started it", old: op(ichor.OperationPending, false)},
		{name: "succeeded", old: op(ichor.OperationSucceeded, true)},
		{name: "failed", old: op(ichor.OperationFailed, true)},
		{name: "running", old: op(ichor.OperationRunning, true),
			wantErr: `user "olivia" cannot delete TalosOperation "rotate" (ca-rotation, started by carol at 2026-05-01T12:00:00Z, now Running), which stops it after its step in flight: ` +
				`it needs the "start" verb on resource "talosoperations", subresource "ca-rotation"`},
		{name: "started, not yet taken up", old: op(ichor.OperationPending, true), wantErr: "now Pending"},
		{name: "running, in a collection delete", old: op(ichor.OperationRunning, true), collection: true, wantErr: `subresource "ca-rotation"`},
		{name: "running, by who may start it", old: op(ichor.OperationRunning, true), allow: true, wantErr: "-"},
		{name: "without the stored object", wantErr: "without the stored object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []authorizer.Attributes
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asked = append(asked, a)
				if tc.allow {
					return authorizer.DecisionAllow, "", nil
				}
				return authorizer.DecisionNoOpinion, "", nil
			}))
			p.SetIchorClient(fake.NewClientset())
			name := "rotate"
			if tc.collection {
				name = "" // as the generic handler names each object of a collection delete
			}
			attrs := admission.NewAttributesRecord(nil, tc.old, gvk, "prod", name, operations, "", admission.Delete, nil, false,
				&user.DefaultInfo{Name: "olivia", Groups: []string{ichor.GroupOperator}})

			err := p.Validate(context.Background(), attrs, nil)

			switch {
			case tc.wantErr == "":
				if err != nil || len(asked) > 0 {
					t.Fatalf("asked %v, error %v; want neither", asked, err)
				}
				return
			case tc.old == nil:
				if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want an internal error containing %q", err, tc.wantErr)
				}
				return
			case tc.allow && err != nil:
				t.Fatalf("an allowed delete: %v", err)
			case !tc.allow && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want Forbidden containing %q", err, tc.wantErr)
			}
			if len(asked) != 1 {
				t.Fatalf("asked %d questions, want 1", len(asked))
			}
			if a := asked[0]; a.GetVerb() != "start" || a.GetResource() != "talosoperations" || a.GetSubresource() != "ca-rotation" ||
				a.GetName() != "rotate" || a.GetNamespace() != "prod" || a.GetUser().GetName() != "olivia" {
				t.Fatalf("asked %+v", a)
			}
		})
	}
}
