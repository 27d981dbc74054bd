package managementaudiences

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
)

// plugin is the plugin over an installation declaring audiences and the
// clusters given.
func plugin(t *testing.T, audiences []string, clusters ...*v1alpha1.TalosCluster) *Plugin {
	t.Helper()
	in := &v1alpha1.IchorInstallation{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.InstallationName},
		Spec: v1alpha1.IchorInstallationSpec{Settings: v1alpha1.InstallationSettings{ManagementAudiences: audiences}}}
	client := fake.NewSimpleClientset(in)
	f := externalversions.NewSharedInformerFactory(client, 0)
	p := New()
	p.SetIchorClient(client)
	p.SetIchorInformers(f)
	if err := f.Ichor().V1alpha1().IchorInstallations().Informer().GetIndexer().Add(in); err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters {
		if err := f.Ichor().V1alpha1().TalosClusters().Informer().GetIndexer().Add(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	return p
}

func clusterTrusting(clientID string) *ichor.TalosCluster {
	c := &ichor.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	if clientID != "" {
		c.Spec.Authentication = &ichor.ClusterAuthentication{IssuerURL: "https://idp.example.net", ClientID: clientID}
	}
	return c
}

func attrs(obj, old any, resource, subresource string, op admission.Operation) admission.Attributes {
	var o, oo = toObject(obj), toObject(old)
	return admission.NewAttributesRecord(o, oo, ichor.Kind("X").WithVersion("v1alpha1"), "team-a", "prod",
		ichor.Resource(resource).WithVersion("v1alpha1"), subresource, op, nil, false, &user.DefaultInfo{Name: "carol"})
}

func TestClusterTrust(t *testing.T) {
	p := plugin(t, []string{"ichor-ui", "console"})
	for _, c := range []struct {
		name        string
		obj, old    *ichor.TalosCluster
		subresource string
		op          admission.Operation
		refused     bool
	}{
		{"Ichor's default audience, on create", clusterTrusting("ichor"), nil, "", admission.Create, true},
		{"a declared audience, on create", clusterTrusting("console"), nil, "", admission.Create, true},
		{"a declared audience, through authentication", clusterTrusting("ichor-ui"), clusterTrusting(""), "authentication", admission.Update, true},
		{"a cluster's own client", clusterTrusting("kubernetes"), nil, "", admission.Create, false},
		{"no trust", clusterTrusting(""), nil, "", admission.Create, false},
		{"unchanged, on a status write", clusterTrusting("console"), clusterTrusting("console"), "status", admission.Update, false},
	} {
		err := p.Validate(context.Background(), attrs(c.obj, c.old, "talosclusters", c.subresource, c.op), nil)
		if refused := err != nil; refused != c.refused || refused && !strings.Contains(err.Error(), "managementAudiences") {
			t.Errorf("%s: %v, want refused %v", c.name, err, c.refused)
		}
	}
}

func TestInstallationAudiences(t *testing.T) {
	trusting := &v1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"},
		Spec: v1alpha1.TalosClusterSpec{Authentication: &v1alpha1.ClusterAuthentication{ClientID: "kubernetes"}}}
	p := plugin(t, nil, trusting)
	in := func(audiences ...string) *ichor.IchorInstallation {
		return &ichor.IchorInstallation{ObjectMeta: metav1.ObjectMeta{Name: ichor.InstallationName},
			Spec: ichor.IchorInstallationSpec{Settings: ichor.InstallationSettings{ManagementAudiences: audiences}}}
	}
	err := p.Validate(context.Background(), attrs(in("ichor-ui", "kubernetes"), in(), "ichorinstallations", "settings", admission.Update), nil)
	if err == nil || !strings.Contains(err.Error(), "team-a/prod (kubernetes)") {
		t.Errorf("declaring a cluster's audience: %v", err)
	}
	if err := p.Validate(context.Background(), attrs(in("ichor-ui"), in(), "ichorinstallations", "settings", admission.Update), nil); err != nil {
		t.Errorf("declaring an audience no cluster trusts: %v", err)
	}
}

func toObject(v any) runtime.Object {
	switch o := v.(type) {
	case *ichor.TalosCluster:
		if o == nil {
			return nil
		}
		return o
	case *ichor.IchorInstallation:
		if o == nil {
			return nil
		}
		return o
	}
	return nil
}
