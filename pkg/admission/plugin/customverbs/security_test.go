package customverbs

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/apiserver"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
)

// TestSecurityDowngrade: a write of a TalosCluster that weakens
// spec.security needs update on talosclusters/security-downgrade; one that
// tightens it, or leaves it, asks nothing.
func TestSecurityDowngrade(t *testing.T) {
	clusters := ichor.Resource("talosclusters").WithVersion("v1alpha1")
	gvk := clusters.GroupVersion().WithKind("TalosCluster")
	hardened := ichor.ClusterSecurity{
		KubeletServingCertificates: ichor.KubeletServingCertificates{Enabled: true, VerifyFromAPIServer: true},
		DiskEncryption:             &ichor.DiskEncryption{Key: ichor.DiskEncryptionKeyTPM},
		SecureBoot:                 ichor.SecureBootRequirement{Required: true},
	}
	with := func(change func(*ichor.ClusterSecurity)) ichor.ClusterSecurity {
		s := *hardened.DeepCopy()
		change(&s)
		return s
	}
	nodeID := ichor.ClusterSecurity{DiskEncryption: &ichor.DiskEncryption{Key: ichor.DiskEncryptionKeyNodeID}}
	for _, tc := range []struct {
		name        string
		old         *ichor.ClusterSecurity // nil: a create
		obj         ichor.ClusterSecurity
		subresource string
		allow       bool
		wantErr     string // "" asks nothing
	}{
		{name: "a plain create", obj: ichor.ClusterSecurity{}},
		{name: "a hardened create", obj: hardened},
		{name: "turning everything on", old: &ichor.ClusterSecurity{}, obj: hardened},
		{name: "a stronger disk-encryption key", old: &nodeID, obj: with(func(*ichor.ClusterSecurity) {})},
		{name: "disk encryption on", old: &ichor.ClusterSecurity{}, obj: nodeID},
		{name: "unchanged", old: &hardened, obj: hardened},
		{name: "the installer image, its subresource's", old: &hardened, obj: with(func(s *ichor.ClusterSecurity) { s.SecureBoot.InstallerImage = "factory.example/i" })},
		{name: "verification off", old: &hardened, obj: with(func(s *ichor.ClusterSecurity) { s.KubeletServingCertificates.VerifyFromAPIServer = false }),
			wantErr: `user "bob" cannot weaken the hardening of TalosCluster "alpha" (spec.security.kubeletServingCertificates.verifyFromAPIServer turned off): ` +
				`it needs the "update" verb on resource "talosclusters", subresource "security-downgrade" (admins hold it; operators may only turn hardening on)`},
		{name: "serving certificates off", old: &hardened, obj: with(func(s *ichor.ClusterSecurity) { s.KubeletServingCertificates = ichor.KubeletServingCertificates{} }),
			wantErr: "(spec.security.kubeletServingCertificates.enabled turned off; spec.security.kubeletServingCertificates.verifyFromAPIServer turned off)"},
		{name: "SecureBoot not required", old: &hardened, obj: with(func(s *ichor.ClusterSecurity) { s.SecureBoot.Required = false }),
			wantErr: "spec.security.secureBoot.required turned off"},
		{name: "a weaker disk-encryption key", old: &hardened, obj: with(func(s *ichor.ClusterSecurity) { s.DiskEncryption.Key = ichor.DiskEncryptionKeyNodeID }),
			wantErr: "spec.security.diskEncryption from the tpm key to the nodeID key"},
		{name: "disk encryption off", old: &nodeID, obj: ichor.ClusterSecurity{},
			wantErr: "spec.security.diskEncryption from the nodeID key to none"},
		{name: "a key Ichor does not rank", old: &ichor.ClusterSecurity{DiskEncryption: &ichor.DiskEncryption{Key: "kms"}}, obj: hardened,
			wantErr: "spec.security.diskEncryption from the kms key to the tpm key"},
		{name: "an admin turns everything off", old: &hardened, obj: ichor.ClusterSecurity{}, allow: true,
			wantErr: "spec.security.diskEncryption from the tpm key to none"},
		{name: "through a subresource", old: &hardened, obj: ichor.ClusterSecurity{}, subresource: "installer-image",
			wantErr: "spec.security.secureBoot.required turned off"},
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
			obj := &ichor.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "alpha"}, Spec: ichor.TalosClusterSpec{Security: tc.obj}}
			var attrs admission.Attributes
			if tc.old == nil {
				attrs = admission.NewAttributesRecord(obj, nil, gvk, "prod", "alpha", clusters, "", admission.Create, nil, false, &user.DefaultInfo{Name: "bob"})
			} else {
				old := obj.DeepCopy()
				old.Spec.Security = *tc.old
				attrs = admission.NewAttributesRecord(obj, old, gvk, "prod", "alpha", clusters, tc.subresource, admission.Update, nil, false, &user.DefaultInfo{Name: "bob"})
			}

			err := p.Validate(context.Background(), attrs, admission.NewObjectInterfacesFromScheme(apiserver.Scheme))

			if tc.wantErr == "" {
				if err != nil || len(asked) > 0 {
					t.Fatalf("asked %v, error %v; want neither", asked, err)
				}
				return
			}
			if len(asked) != 1 {
				t.Fatalf("asked %d questions, want 1", len(asked))
			}
			if a := asked[0]; a.GetVerb() != "update" || a.GetResource() != "talosclusters" || a.GetSubresource() != SecurityDowngradeSubresource ||
				a.GetName() != "alpha" || a.GetNamespace() != "prod" || a.GetAPIGroup() != "ichor.dev" {
				t.Fatalf("asked %+v", a)
			}
			switch {
			case tc.allow && err != nil:
				t.Fatalf("an allowed downgrade: %v", err)
			case !tc.allow && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want Forbidden containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestHardeningCoversSpecSecurity: every field of spec.security is either
// ranked by Hardening or kept for admins by a field subresource, so a new
// option cannot be switched off by an operator unnoticed.
func TestHardeningCoversSpecSecurity(t *testing.T) {
	var covered []string
	for _, h := range Hardening {
		covered = append(covered, h.Field)
	}
	for _, f := range ichor.FieldSubresourcesOf("talosclusters") {
		if !f.Shared {
			covered = append(covered, f.Field)
		}
	}
	var leaves func(typ reflect.Type, path string) []string
	leaves = func(typ reflect.Type, path string) []string {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct {
			return []string{path}
		}
		var out []string
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			out = append(out, leaves(typ.Field(i).Type, path+"."+name)...)
		}
		return out
	}
	fields := leaves(reflect.TypeFor[v1alpha1.ClusterSecurity](), "spec.security")
	if len(fields) < 5 {
		t.Fatalf("found only %v", fields)
	}
	for _, f := range fields {
		if !slices.ContainsFunc(covered, func(c string) bool { return f == c || strings.HasPrefix(f, c+".") }) {
			t.Errorf("%s is neither in Hardening (how turning it off weakens the cluster) nor an admin's field subresource", f)
		}
	}
}
