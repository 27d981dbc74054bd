package customverbs

import (
	"context"
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
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/apiserver"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
)

func TestValidate(t *testing.T) {
	gvr := func(resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "ichor.dev", Version: "v1alpha1", Resource: resource}
	}
	machines := gvr("talosmachines")
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"ichor:operator"}}

	// asked is the verb, resource and subresource the authorizer must be asked; "" asks nothing.
	for _, tc := range []struct {
		name        string
		gvr         schema.GroupVersionResource
		subresource string
		op          admission.Operation
		decision    authorizer.Decision
		asked       string
		wantErr     string
	}{
		{name: "approval allowed", gvr: machines, subresource: "approval", op: admission.Update, decision: authorizer.DecisionAllow, asked: "approve talosmachines/approval"},
		{name: "approval denied", gvr: machines, subresource: "approval", op: admission.Update, decision: authorizer.DecisionDeny, asked: "approve talosmachines/approval",
			wantErr: `user "bob" cannot approve talosmachines/approval "m1": it needs the "approve" verb on resource "talosmachines", subresource "approval": no rule`},
		{name: "approval with no opinion", gvr: machines, subresource: "approval", op: admission.Update, decision: authorizer.DecisionNoOpinion, asked: "approve talosmachines/approval",
			wantErr: `needs the "approve" verb`},
		// The verbs of actions are asked by the storage inside its update, of the object it changes.
		{name: "start is left to the storage", gvr: gvr("talosoperations"), subresource: "start", op: admission.Create, decision: authorizer.DecisionDeny},
		{name: "reclaim is left to the storage", gvr: gvr("machinereclaims"), subresource: "reclaim", op: admission.Create, decision: authorizer.DecisionDeny},
		{name: "override is left to the storage", gvr: gvr("talosclusters"), subresource: "override", op: admission.Create, decision: authorizer.DecisionDeny},
		{name: "status is no action", gvr: machines, subresource: "status", op: admission.Update, decision: authorizer.DecisionDeny},
		{name: "main resource is no action", gvr: machines, op: admission.Update, decision: authorizer.DecisionDeny},
		{name: "create of approval is not guarded here", gvr: machines, subresource: "approval", op: admission.Create, decision: authorizer.DecisionDeny},
		{name: "other group", gvr: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "talosmachines"}, subresource: "approval",
			op: admission.Update, decision: authorizer.DecisionDeny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []authorizer.Attributes
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asked = append(asked, a)
				return tc.decision, "no rule", nil
			}))
			p.SetIchorClient(fake.NewClientset())
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			attrs := admission.NewAttributesRecord(nil, nil, schema.GroupVersionKind{}, "prod", "m1", tc.gvr, tc.subresource, tc.op, nil, false, bob)

			err := p.Validate(context.Background(), attrs, nil)

			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want Forbidden containing %q", err, tc.wantErr)
			}
			if got := len(asked) > 0; got != (tc.asked != "") {
				t.Fatalf("authorizer asked = %v, want %v", got, tc.asked != "")
			}
			if tc.asked != "" {
				a := asked[0]
				if got := a.GetVerb() + " " + a.GetResource() + "/" + a.GetSubresource(); got != tc.asked {
					t.Fatalf("asked %q, want %q", got, tc.asked)
				}
				if a.GetName() != "m1" || a.GetNamespace() != "prod" || a.GetAPIGroup() != "ichor.dev" || !a.IsResourceRequest() || a.GetUser().GetName() != "bob" {
					t.Fatalf("asked %+v", a)
				}
			}
		})
	}
}

func TestValidateInitializationNeedsAnAuthorizerAndAClient(t *testing.T) {
	if err := New().ValidateInitialization(); err == nil {
		t.Fatal("a plugin without an authorizer initialized")
	}
	p := New()
	p.SetAuthorizer(authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	}))
	if err := p.ValidateInitialization(); err == nil {
		t.Fatal("a plugin without an Ichor client initialized")
	}
}

// TestPrivilegedApproval: approving a control plane, or any machine of a
// bootstrapped (or unreadable) cluster, needs approve on
// talosmachines/privileged-approval as well; a worker of a cluster being
// built, a rejection, or a repeated decision does not.
func TestPrivilegedApproval(t *testing.T) {
	now := metav1.Now()
	clusters := fake.NewClientset(
		&v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "building"}},
		&v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "running"}, Status: v1alpha1.TalosClusterStatus{BootstrappedAt: &now}},
	)
	machine := func(cluster string, role ichor.MachineRole, decision ichor.ApprovalDecision) *ichor.TalosMachine {
		m := &ichor.TalosMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "m1"}, Spec: ichor.TalosMachineSpec{ClusterName: cluster, Role: role}}
		if decision != "" {
			m.Status.Approval = &ichor.ApprovalStatus{Decision: decision}
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		obj, old *ichor.TalosMachine
		wantErr  string
	}{
		{name: "a worker of a cluster being built", obj: machine("building", ichor.MachineRoleWorker, ichor.ApprovalApproved), old: machine("building", ichor.MachineRoleWorker, "")},
		{name: "a control plane", obj: machine("building", ichor.MachineRoleControlPlane, ichor.ApprovalApproved), old: machine("building", ichor.MachineRoleControlPlane, ""),
			wantErr: `user "bob" cannot approve TalosMachine "m1" (a control plane receives every CA key of its cluster): it needs the "approve" verb on resource "talosmachines", subresource "privileged-approval"`},
		{name: "a worker of a running cluster", obj: machine("running", ichor.MachineRoleWorker, ichor.ApprovalApproved), old: machine("running", ichor.MachineRoleWorker, ""),
			wantErr: "is bootstrapped, so the machine joins a running cluster"},
		{name: "a worker of a missing cluster", obj: machine("gone", ichor.MachineRoleWorker, ichor.ApprovalApproved), old: machine("gone", ichor.MachineRoleWorker, ""),
			wantErr: "does not exist"},
		{name: "a control plane rejected", obj: machine("building", ichor.MachineRoleControlPlane, ichor.ApprovalRejected), old: machine("building", ichor.MachineRoleControlPlane, "")},
		{name: "a control plane approved again", obj: machine("running", ichor.MachineRoleControlPlane, ichor.ApprovalApproved), old: machine("running", ichor.MachineRoleControlPlane, ichor.ApprovalApproved)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				if a.GetSubresource() == "approval" {
					return authorizer.DecisionAllow, "", nil // bob is an operator
				}
				return authorizer.DecisionNoOpinion, "", nil
			}))
			p.SetIchorClient(clusters)
			gvr := ichor.Resource("talosmachines").WithVersion("v1alpha1")
			attrs := admission.NewAttributesRecord(tc.obj, tc.old, gvr.GroupVersion().WithKind("TalosMachine"), "prod", "m1", gvr, "approval", admission.Update, nil, false,
				&user.DefaultInfo{Name: "bob", Groups: []string{ichor.GroupOperator}})
			err := p.Validate(context.Background(), attrs, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want Forbidden containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestValidateCredentialPurpose(t *testing.T) {
	requests := schema.GroupVersionResource{Group: "ichor.dev", Version: "v1alpha1", Resource: "taloscredentialrequests"}
	bob := &user.DefaultInfo{Name: "bob"}
	tcr := func(purpose ichor.CredentialPurpose, machines ...string) *ichor.TalosCredentialRequest {
		return &ichor.TalosCredentialRequest{Spec: ichor.TalosCredentialRequestSpec{ClusterName: "prod", Purpose: purpose, Machines: machines}}
	}
	// The authorizer allows downloads of the reader talosconfig of prod and the etcd snapshot of m1 only.
	allowed := map[string]bool{"talosclusters/talosconfig-reader/prod": true, "talosmachines/etcd-snapshot/m1": true,
		"talosmachines/packet-capture/m3": true}

	for _, tc := range []struct {
		name    string
		obj     *ichor.TalosCredentialRequest
		wantErr string
	}{
		{name: "reader talosconfig of the cluster", obj: tcr(ichor.PurposeTalosconfigReader)},
		{name: "snapshot of an allowed machine", obj: tcr(ichor.PurposeEtcdSnapshot, "m1")},
		{name: "snapshot of a machine not granted", obj: tcr(ichor.PurposeEtcdSnapshot, "m1", "m2"),
			wantErr: `user "bob" cannot request a etcd-snapshot credential: it needs the "download" verb on talosmachines/etcd-snapshot "m2"`},
		{name: "snapshot of every machine", obj: tcr(ichor.PurposeEtcdSnapshot),
			wantErr: "talosmachines/etcd-snapshot of every talosmachine in the namespace"},
		{name: "packet capture not granted", obj: tcr(ichor.PurposePacketCapture, "m1"), wantErr: `needs the "download" verb on talosmachines/packet-capture "m1"`},
		// os:operator reboots, shuts down, upgrades and snapshots every node.
		{name: "packet capture with only its download", obj: tcr(ichor.PurposePacketCapture, "m3"),
			wantErr: `needs the "download" verb on talosmachines/etcd-snapshot of every talosmachine in the namespace`},
		{name: "packet capture with every right its role gives", obj: tcr(ichor.PurposePacketCapture, "m4")},
		{name: "unknown purpose", obj: tcr("root-shell"), wantErr: `purpose "root-shell" grants no credential`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				if a.GetVerb() == ichor.VerbDownload && allowed[a.GetResource()+"/"+a.GetSubresource()+"/"+a.GetName()] {
					return authorizer.DecisionAllow, "", nil
				}
				if tc.name == "packet capture with every right its role gives" {
					return authorizer.DecisionAllow, "", nil // an admin's
				}
				return authorizer.DecisionNoOpinion, "", nil
			}))
			attrs := admission.NewAttributesRecord(tc.obj, nil, schema.GroupVersionKind{}, "ns", "r1", requests, "", admission.Create, nil, false, bob)
			err := p.Validate(context.Background(), attrs, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want Forbidden containing %q", err, tc.wantErr)
			}
		})
	}
}

// A create that sets an admin-only field needs that field's subresource verb;
// a field at its default (the installation's defaulted settings) needs none.
func TestCreateSettingAFieldSubresource(t *testing.T) {
	clusters := ichor.Resource("talosclusters").WithVersion("v1alpha1")
	installations := ichor.Resource("ichorinstallations").WithVersion("v1alpha1")
	defaulted := func() *ichor.IchorInstallation {
		in := &v1alpha1.IchorInstallation{}
		apiserver.Scheme.Default(in)
		out := &ichor.IchorInstallation{}
		if err := apiserver.Scheme.Convert(in, out, nil); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		gvr     schema.GroupVersionResource
		kind    string
		obj     runtime.Object
		granted string // the one subresource the requester may update
		asked   []string
		wantErr string
	}{
		{name: "a plain cluster", gvr: clusters, kind: "TalosCluster", obj: &ichor.TalosCluster{}},
		{name: "a cluster sharing a bundle", gvr: clusters, kind: "TalosCluster",
			obj:   &ichor.TalosCluster{Spec: ichor.TalosClusterSpec{SecretsRef: &ichor.LocalSecretReference{Name: "other-secrets"}}},
			asked: []string{"secret-references"}, wantErr: `user "bob" cannot set spec.secretsRef on create: it needs the "update" verb on resource "talosclusters", subresource "secret-references"`},
		{name: "a cluster with Cilium values and its verb", gvr: clusters, kind: "TalosCluster", granted: "cilium-values",
			obj: &ichor.TalosCluster{Spec: ichor.TalosClusterSpec{CiliumValues: "a: b\n"}}, asked: []string{"cilium-values"}},
		{name: "a cluster with its authentication", gvr: clusters, kind: "TalosCluster",
			obj:   &ichor.TalosCluster{Spec: ichor.TalosClusterSpec{Authentication: &ichor.ClusterAuthentication{IssuerURL: "https://i"}}},
			asked: []string{"authentication"}, wantErr: `subresource "authentication"`},
		{name: "an installation at its defaults", gvr: installations, kind: "IchorInstallation", obj: defaulted()},
		{name: "an installation with settings", gvr: installations, kind: "IchorInstallation", obj: func() runtime.Object {
			in := defaulted()
			in.Spec.Settings.ProvisioningNetworks = []string{"10.0.0.0/24"}
			return in
		}(), asked: []string{"settings"}, wantErr: `subresource "settings"`},
		{name: "an installation with a version", gvr: installations, kind: "IchorInstallation", granted: "version", obj: func() runtime.Object {
			in := defaulted()
			in.Spec.Version = "v1.0.0"
			return in
		}(), asked: []string{"version"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				if a.GetVerb() != ichor.VerbUpdate || a.GetResource() != tc.gvr.Resource {
					t.Errorf("asked %s %s", a.GetVerb(), a.GetResource())
				}
				asked = append(asked, a.GetSubresource())
				if a.GetSubresource() == tc.granted {
					return authorizer.DecisionAllow, "", nil
				}
				return authorizer.DecisionNoOpinion, "", nil
			}))
			gvk := tc.gvr.GroupVersion().WithKind(tc.kind)
			attrs := admission.NewAttributesRecord(tc.obj, nil, gvk, "ns", "x", tc.gvr, "", admission.Create, nil, false, &user.DefaultInfo{Name: "bob"})
			err := p.Validate(context.Background(), attrs, admission.NewObjectInterfacesFromScheme(apiserver.Scheme))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want Forbidden containing %q", err, tc.wantErr)
			}
			if strings.Join(asked, ",") != strings.Join(tc.asked, ",") {
				t.Fatalf("asked about %v, want %v", asked, tc.asked)
			}
		})
	}
}

// A reclaim of a managed machine needs delete on that machine, where it is.
func TestReclaimSourceNeedsDelete(t *testing.T) {
	reclaims := ichor.Resource("machinereclaims").WithVersion("v1alpha1")
	obj := &ichor.MachineReclaim{Spec: ichor.MachineReclaimSpec{MachineRef: &ichor.MachineReference{Namespace: "other", Name: "m9"}, ClusterName: "prod"}}
	for _, allow := range []bool{false, true} {
		var asked authorizer.Attributes
		p := New()
		p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			asked = a
			if allow {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, "", nil
		}))
		attrs := admission.NewAttributesRecord(obj, nil, reclaims.GroupVersion().WithKind("MachineReclaim"), "prod", "r1", reclaims, "", admission.Create, nil, false, &user.DefaultInfo{Name: "rita"})
		err := p.Validate(context.Background(), attrs, admission.NewObjectInterfacesFromScheme(apiserver.Scheme))
		if asked == nil || asked.GetVerb() != "delete" || asked.GetNamespace() != "other" || asked.GetName() != "m9" || asked.GetResource() != "talosmachines" {
			t.Fatalf("asked %+v", asked)
		}
		if allow && err != nil {
			t.Errorf("allowed: %v", err)
		}
		if !allow && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `needs the "delete" verb on talosmachines "m9" in namespace "other"`)) {
			t.Errorf("refused: %v", err)
		}
	}
}

// A reclaim of an unmanaged node needs get and delete on the talosconfig
// Secret it hands over: it is used, then deleted.
func TestReclaimTalosconfigNeedsGetAndDelete(t *testing.T) {
	reclaims := ichor.Resource("machinereclaims").WithVersion("v1alpha1")
	obj := &ichor.MachineReclaim{Spec: ichor.MachineReclaimSpec{ClusterName: "prod", Unmanaged: &ichor.UnmanagedMachine{
		Address: "127.0.0.9:50000", TalosconfigSecretRef: ichor.SecretKeySelector{Name: "old-talosconfig", Key: "talosconfig"},
	}}}
	for _, granted := range [][]string{nil, {"get"}, {"delete"}, {"get", "delete"}} {
		var asked []string
		p := New()
		p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			if a.GetNamespace() != "prod" || a.GetName() != "old-talosconfig" || a.GetResource() != "secrets" || a.GetAPIGroup() != "" {
				t.Fatalf("asked %+v", a)
			}
			asked = append(asked, a.GetVerb())
			if slices.Contains(granted, a.GetVerb()) {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, "", nil
		}))
		attrs := admission.NewAttributesRecord(obj, nil, reclaims.GroupVersion().WithKind("MachineReclaim"), "prod", "r1", reclaims, "", admission.Create, nil, false, &user.DefaultInfo{Name: "rita"})
		err := p.Validate(context.Background(), attrs, admission.NewObjectInterfacesFromScheme(apiserver.Scheme))
		allowed := len(granted) == 2
		if allowed && err != nil {
			t.Errorf("granted %v: %v", granted, err)
		}
		if !allowed && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `needs the "get" and "delete" verbs on secrets "old-talosconfig" in namespace "prod"`)) {
			t.Errorf("granted %v: %v (asked %v)", granted, err, asked)
		}
	}
}

// A TalosBackup that awaits an upload needs create on talosbackups/upload,
// the upload's own verb (an admin's); one the controller takes needs nothing
// more than create.
func TestUploadBackupNeedsTheUploadVerb(t *testing.T) {
	backups := ichor.Resource("talosbackups").WithVersion("v1alpha1")
	upload := &ichor.TalosBackup{Spec: ichor.TalosBackupSpec{ClusterName: "prod", Upload: &ichor.BackupUpload{Digest: "sha256:" + strings.Repeat("ab", 32)}}}
	taken := &ichor.TalosBackup{Spec: ichor.TalosBackupSpec{ClusterName: "prod"}}
	for _, tc := range []struct {
		obj   *ichor.TalosBackup
		allow bool
	}{{upload, false}, {upload, true}, {taken, false}} {
		var asked []authorizer.Attributes
		p := New()
		p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			asked = append(asked, a)
			if tc.allow {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, "", nil
		}))
		attrs := admission.NewAttributesRecord(tc.obj, nil, backups.GroupVersion().WithKind("TalosBackup"), "ns", "b1", backups, "", admission.Create, nil, false, &user.DefaultInfo{Name: "olga"})
		err := p.Validate(context.Background(), attrs, admission.NewObjectInterfacesFromScheme(apiserver.Scheme))
		if tc.obj == taken {
			if err != nil || len(asked) != 0 {
				t.Errorf("a backup the controller takes: %v, asked %+v", err, asked)
			}
			continue
		}
		if len(asked) != 1 || asked[0].GetVerb() != "create" || asked[0].GetSubresource() != "upload" || asked[0].GetName() != "b1" || asked[0].GetResource() != "talosbackups" {
			t.Fatalf("asked %+v", asked)
		}
		if tc.allow && err != nil {
			t.Errorf("allowed: %v", err)
		}
		if !tc.allow && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `needs the "create" verb on resource "talosbackups", subresource "upload"`)) {
			t.Errorf("refused: %v", err)
		}
	}
}
