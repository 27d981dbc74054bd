package userroles

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	k8stesting "k8s.io/client-go/testing"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
)

func stored(name string, role v1alpha1.UserRole, disabled bool) *v1alpha1.IchorUser {
	return &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.IchorUserSpec{Role: role, Disabled: disabled}}
}

func internal(name string, role ichor.UserRole, disabled bool) *ichor.IchorUser {
	return &ichor.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ichor.IchorUserSpec{Role: role, Disabled: disabled}}
}

var (
	admin    = &user.DefaultInfo{Name: "carol", Groups: []string{ichor.GroupAdmin}}
	operator = &user.DefaultInfo{Name: "olivia", Groups: []string{ichor.GroupOperator}}
	masters  = &user.DefaultInfo{Name: "root", Groups: []string{user.SystemPrivilegedGroup}}
	outsider = &user.DefaultInfo{Name: "mallory", Groups: []string{"team:ops"}}
)

// rbac answers as artifacts/roles.yaml binds the grant verb: to admins, on
// every role; system:masters holds everything.
type rbac struct{}

func (r *rbac) authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {

	for _, g := range a.GetUser().GetGroups() {
		if g == user.SystemPrivilegedGroup || (g == ichor.GroupAdmin && a.GetVerb() == ichor.VerbGrant && a.GetResource() == "ichorusers") {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "no RBAC policy matched", nil
}

func newPlugin(t *testing.T, client *fake.Clientset) *Plugin {
	t.Helper()
	p := New()
	p.SetIchorClient(client)
	p.SetAuthorizer(authorizer.AuthorizerFunc((&rbac{}).authorize))
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRoles(t *testing.T) {
	users := schemaUsers()
	for _, tc := range []struct {
		name     string
		stored   []runtime.Object
		op       admission.Operation
		sub      string
		obj, old *ichor.IchorUser
		who      user.Info
		target   string
		wantErr  string
	}{
		{name: "admin creates an admin", op: admission.Create, obj: internal("a2", ichor.UserRoleAdmin, false), who: admin},
		{name: "system:masters creates an admin", op: admission.Create, obj: internal("a2", ichor.UserRoleAdmin, false), who: masters},
		{name: "operator creates a viewer", op: admission.Create, obj: internal("v1", ichor.UserRoleViewer, false), who: operator,
			wantErr: `user "olivia" cannot create an IchorUser of role viewer: it needs the "grant" verb on resource "ichorusers", subresource "viewer": no RBAC policy matched`},
		{name: "outsider creates a viewer", op: admission.Create, obj: internal("v1", ichor.UserRoleViewer, false), who: outsider,
			wantErr: `user "mallory" cannot create an IchorUser of role viewer`},
		{name: "operator promotes a viewer", op: admission.Update, obj: internal("v1", ichor.UserRoleAdmin, false), old: internal("v1", ichor.UserRoleViewer, false),
			who: operator, wantErr: "cannot change an IchorUser of role viewer"},
		{name: "operator disables an admin", op: admission.Update, obj: internal("a1", ichor.UserRoleAdmin, true), old: internal("a1", ichor.UserRoleAdmin, false),
			who: operator, wantErr: "cannot change an IchorUser of role admin"},
		{name: "operator deletes a viewer", op: admission.Delete, old: internal("v1", ichor.UserRoleViewer, false), who: operator,
			wantErr: "cannot delete an IchorUser of role viewer"},
		{name: "admin promotes a viewer", op: admission.Update, obj: internal("v1", ichor.UserRoleAdmin, false), old: internal("v1", ichor.UserRoleViewer, false), who: admin},
		{name: "last admin disabled", stored: []runtime.Object{stored("a1", v1alpha1.UserRoleAdmin, false), stored("a2", v1alpha1.UserRoleAdmin, true)},
			op: admission.Update, obj: internal("a1", ichor.UserRoleAdmin, true), old: internal("a1", ichor.UserRoleAdmin, false), who: admin,
			wantErr: "a1 is the last enabled admin: to disable or demote it"},
		{name: "last admin demoted", stored: []runtime.Object{stored("a1", v1alpha1.UserRoleAdmin, false)},
			op: admission.Update, obj: internal("a1", ichor.UserRoleOperator, false), old: internal("a1", ichor.UserRoleAdmin, false), who: admin,
			wantErr: "last enabled admin"},
		{name: "an admin demoted while another remains", stored: []runtime.Object{stored("a1", v1alpha1.UserRoleAdmin, false), stored("a2", v1alpha1.UserRoleAdmin, false)},
			op: admission.Update, obj: internal("a1", ichor.UserRoleOperator, false), old: internal("a1", ichor.UserRoleAdmin, false), who: admin},
		{name: "last admin deleted", stored: []runtime.Object{stored("a1", v1alpha1.UserRoleAdmin, false)},
			op: admission.Delete, old: internal("a1", ichor.UserRoleAdmin, false), who: admin, wantErr: "to delete it"},
		{name: "disabled admin deleted", stored: []runtime.Object{stored("a1", v1alpha1.UserRoleAdmin, true)},
			op: admission.Delete, old: internal("a1", ichor.UserRoleAdmin, true), who: admin},
		// The password action decides on the user it changes (pkg/registry/ichor/ichoruser).
		{name: "a password is left to its action", stored: []runtime.Object{stored("a1", v1alpha1.UserRoleAdmin, false)},
			op: admission.Update, sub: "password", target: "a1", who: operator},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlugin(t, fake.NewClientset(tc.stored...))
			name := tc.target
			var obj, old runtime.Object
			if tc.obj != nil {
				obj, name = tc.obj, tc.obj.Name
			}
			if tc.old != nil {
				old, name = tc.old, tc.old.Name
			}
			attrs := admission.NewAttributesRecord(obj, old, ichor.Kind("IchorUser").WithVersion(""), "", name, users, tc.sub, tc.op, nil, false, tc.who)
			err := p.Validate(context.Background(), attrs, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want Forbidden with %q", err, tc.wantErr)
			}
		})
	}
}

func schemaUsers() schema.GroupVersionResource {
	return ichor.Resource("ichorusers").WithVersion("v1alpha1")
}

// A removal marks the admin it counts on, conditional on the version it
// read; a dry run marks nothing.
func TestRemovalMarksTheAdminItCountsOn(t *testing.T) {
	for _, dryRun := range []bool{false, true} {
		t.Run(fmt.Sprintf("dryRun=%v", dryRun), func(t *testing.T) {
			a2 := stored("a2", v1alpha1.UserRoleAdmin, false)
			a2.ResourceVersion = "7"
			client := fake.NewClientset(stored("a1", v1alpha1.UserRoleAdmin, false), a2, stored("a3", v1alpha1.UserRoleAdmin, false))
			var updates []*v1alpha1.IchorUser
			client.PrependReactor("update", "ichorusers", func(action k8stesting.Action) (bool, runtime.Object, error) {
				u := action.(k8stesting.UpdateAction).GetObject().(*v1alpha1.IchorUser)
				updates = append(updates, u)
				return false, nil, nil
			})
			p := newPlugin(t, client)
			attrs := admission.NewAttributesRecord(nil, internal("a1", ichor.UserRoleAdmin, false), ichor.Kind("IchorUser").WithVersion(""),
				"", "a1", schemaUsers(), "", admission.Delete, nil, dryRun, admin)
			if err := p.Validate(context.Background(), attrs, nil); err != nil {
				t.Fatal(err)
			}
			if dryRun {
				if len(updates) != 0 {
					t.Fatalf("a dry run wrote %d users", len(updates))
				}
				return
			}
			if len(updates) != 1 || updates[0].Name != "a2" || updates[0].ResourceVersion != "7" ||
				!strings.HasPrefix(updates[0].Annotations[CountedOnAnnotation], "to delete a1 at ") {
				t.Fatalf("want one conditional update marking a2, got %+v", updates)
			}
		})
	}
}

// When the admin counted on changes between the list and the mark, the check
// reads again, and decides on what it reads then.
func TestCountedOnAdminChangesUnderTheCheck(t *testing.T) {
	client := fake.NewClientset(stored("a1", v1alpha1.UserRoleAdmin, false), stored("a2", v1alpha1.UserRoleAdmin, false))
	client.PrependReactor("update", "ichorusers", func(action k8stesting.Action) (bool, runtime.Object, error) {
		// a2 is demoted concurrently: the mark conflicts, and a2 is no admin now.
		demoted := stored("a2", v1alpha1.UserRoleOperator, false)
		demoted.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("IchorUser"))
		if err := client.Tracker().Update(schemaUsers(), demoted, ""); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewConflict(ichor.Resource("ichorusers"), "a2", errors.New("the object has been modified"))
	})
	p := newPlugin(t, client)
	attrs := admission.NewAttributesRecord(nil, internal("a1", ichor.UserRoleAdmin, false), ichor.Kind("IchorUser").WithVersion(""),
		"", "a1", schemaUsers(), "", admission.Delete, nil, false, admin)
	if err := p.Validate(context.Background(), attrs, nil); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "a1 is the last enabled admin") {
		t.Fatalf("got %v, want the last-admin refusal", err)
	}
}
