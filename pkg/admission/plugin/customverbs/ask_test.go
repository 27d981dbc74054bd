package customverbs

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apiserver"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
)

// TestAsk: ask puts the question to the authorizer for the request's user
// and forbids the request unless it is allowed, saying what the authorizer
// said.
func TestAsk(t *testing.T) {
	q := question{verb: "download", group: "ichor.dev", version: "v1alpha1", resource: "talosmachines", subresource: "etcd-snapshot", namespace: "prod", name: "cp-1"}
	for _, tc := range []struct {
		name     string
		decision authorizer.Decision
		reason   string
		err      error
		wantErr  string // "" allows
	}{
		{name: "allowed", decision: authorizer.DecisionAllow},
		{name: "allowed despite an error", decision: authorizer.DecisionAllow, err: errors.New("cache stale")},
		{name: "denied", decision: authorizer.DecisionDeny, reason: "no rule",
			wantErr: `user "bob" cannot take the snapshot: no rule`},
		{name: "no opinion", decision: authorizer.DecisionNoOpinion,
			wantErr: `user "bob" cannot take the snapshot`},
		{name: "an authorizer error", decision: authorizer.DecisionNoOpinion, err: errors.New("webhook timed out"),
			wantErr: `user "bob" cannot take the snapshot (authorizer error: webhook timed out)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []authorizer.Attributes
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asked = append(asked, a)
				return tc.decision, tc.reason, tc.err
			}))
			bob := &user.DefaultInfo{Name: "bob", Groups: []string{"ichor:operator"}}
			attrs := admission.NewAttributesRecord(nil, nil, schema.GroupVersionKind{}, "ns", "r1",
				ichor.Resource("taloscredentialrequests").WithVersion("v1alpha1"), "", admission.Create, nil, false, bob)

			err := p.ask(context.Background(), attrs, q, "take the snapshot")

			if len(asked) != 1 {
				t.Fatalf("asked the authorizer %d times", len(asked))
			}
			want := authorizer.AttributesRecord{User: bob, Verb: q.verb, Namespace: q.namespace, APIGroup: q.group, APIVersion: q.version,
				Resource: q.resource, Subresource: q.subresource, Name: q.name, ResourceRequest: true}
			if got, ok := asked[0].(authorizer.AttributesRecord); !ok || !reflect.DeepEqual(got, want) {
				t.Errorf("asked %+v, want %+v", asked[0], want)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (!apierrors.IsForbidden(err) || !strings.HasSuffix(err.Error(), tc.wantErr)):
				t.Errorf("error = %v, want Forbidden ending in %q", err, tc.wantErr)
			}
		})
	}
}

// TestEveryVerbAskedIsInTheVerbsTable: the custom verbs the checks ask of
// Ichor's resources are the ones ichor.CustomVerbs lists where they are
// asked, the table docs/reference/verbs.md and artifacts/roles.yaml follow.
func TestEveryVerbAskedIsInTheVerbsTable(t *testing.T) {
	listed := map[string]bool{
		// The upload's own verb, the one POST talosbackups/NAME/upload needs.
		"create talosbackups/upload": true,
	}
	for _, r := range ichor.CustomVerbs {
		for _, on := range r.On {
			listed[r.Verb+" "+on] = true
		}
	}
	gvr := func(resource string) schema.GroupVersionResource {
		return ichor.Resource(resource).WithVersion("v1alpha1")
	}
	now := metav1.Now()
	requests := []admission.Attributes{
		// An approval of a control plane.
		update(gvr("talosmachines"), "approval",
			&ichor.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: "cp-1"}, Spec: ichor.TalosMachineSpec{ClusterName: "alpha", Role: ichor.MachineRoleControlPlane},
				Status: ichor.TalosMachineStatus{Approval: &ichor.ApprovalStatus{Decision: ichor.ApprovalApproved}}},
			&ichor.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: "cp-1"}, Spec: ichor.TalosMachineSpec{ClusterName: "alpha", Role: ichor.MachineRoleControlPlane}}),
		// A cluster that weakens its hardening.
		update(gvr("talosclusters"), "",
			&ichor.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}},
			&ichor.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: ichor.TalosClusterSpec{
				Security: ichor.ClusterSecurity{SecureBoot: ichor.SecureBootRequirement{Required: true}}}}),
		// A cluster created with every field of a field subresource.
		create(gvr("talosclusters"), "TalosCluster", &ichor.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: ichor.TalosClusterSpec{
			SecretsRef: &ichor.LocalSecretReference{Name: "other"}, CiliumValues: "a: b\n",
			Authentication: &ichor.ClusterAuthentication{IssuerURL: "https://i"}}}),
		// A reclaim of a managed machine, and a backup that awaits an upload.
		create(gvr("machinereclaims"), "MachineReclaim", &ichor.MachineReclaim{Spec: ichor.MachineReclaimSpec{
			ClusterName: "alpha", MachineRef: &ichor.MachineReference{Namespace: "other", Name: "m9"}}}),
		create(gvr("talosbackups"), "TalosBackup", &ichor.TalosBackup{Spec: ichor.TalosBackupSpec{
			ClusterName: "alpha", Upload: &ichor.BackupUpload{Digest: "sha256:" + strings.Repeat("ab", 32)}}}),
		// The delete of an operation that runs.
		admission.NewAttributesRecord(nil, &ichor.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: "op"},
			Spec:   ichor.TalosOperationSpec{ClusterName: "alpha", Type: ichor.OperationCARotation},
			Status: ichor.TalosOperationStatus{Phase: ichor.OperationRunning, StartedAt: &now}},
			schema.GroupVersionKind{}, "prod", "op", gvr("talosoperations"), "", admission.Delete, nil, false, &user.DefaultInfo{Name: "bob"}),
	}
	for purpose := range ichor.CredentialPurposes {
		requests = append(requests, create(gvr("taloscredentialrequests"), "TalosCredentialRequest", &ichor.TalosCredentialRequest{
			Spec: ichor.TalosCredentialRequestSpec{ClusterName: "alpha", Purpose: purpose, Machines: []string{"cp-1"}}}))
	}

	asked := map[string]bool{}
	p := New()
	p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetAPIGroup() == ichor.GroupName {
			path := a.GetResource()
			if a.GetSubresource() != "" {
				path += "/" + a.GetSubresource()
			}
			asked[a.GetVerb()+" "+path] = true
		}
		return authorizer.DecisionAllow, "", nil
	}))
	p.SetIchorClient(fake.NewClientset())
	for _, a := range requests {
		if err := p.Validate(context.Background(), a, admission.NewObjectInterfacesFromScheme(apiserver.Scheme)); err != nil {
			t.Errorf("%s %s: %v", a.GetOperation(), a.GetResource().Resource, err)
		}
	}
	for _, want := range []string{"approve talosmachines/privileged-approval", "update talosclusters/security-downgrade",
		"update talosclusters/secret-references", "delete talosmachines", "create talosbackups/upload",
		"start talosoperations/ca-rotation", "download talosmachines/etcd-snapshot"} {
		if !asked[want] {
			t.Errorf("the requests did not ask %s", want)
		}
	}
	var unlisted []string
	for q := range asked {
		if !listed[q] {
			unlisted = append(unlisted, q)
		}
	}
	slices.Sort(unlisted)
	if len(unlisted) > 0 {
		t.Errorf("asked verbs ichor.CustomVerbs does not list: %v", unlisted)
	}
}

// update is an update of resource (its subresource) from old to obj by bob.
func update(resource schema.GroupVersionResource, subresource string, obj, old runtime.Object) admission.Attributes {
	name := obj.(metav1.Object).GetName()
	return admission.NewAttributesRecord(obj, old, schema.GroupVersionKind{}, "prod", name, resource, subresource, admission.Update, nil, false, &user.DefaultInfo{Name: "bob"})
}

// create is a create of obj, a kind of resource, by bob.
func create(resource schema.GroupVersionResource, kind string, obj runtime.Object) admission.Attributes {
	return admission.NewAttributesRecord(obj, nil, resource.GroupVersion().WithKind(kind), "prod", "x", resource, "", admission.Create, nil, false, &user.DefaultInfo{Name: "bob"})
}
