package integration

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestManagedClustersTrustNoManagementAudience: an admin who has a managed
// cluster trust an audience the management plane accepts would let that
// cluster's kube-apiserver (its root, its own admins) capture Ichor
// people's tokens and replay them to the management plane. Each way there
// is refused: on create, through the authentication subresource, and by
// declaring a cluster's audience a management one afterwards.
func TestManagedClustersTrustNoManagementAudience(t *testing.T) {
	ctx := apiContext(t)
	ns := cp.Namespace(t)
	useSettings(ctx, t, func(s *v1alpha1.InstallationSettings) { s.ManagementAudiences = []string{"ichor-ui"} })
	clusters := apiClientFor(t, cp.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosClusters(ns)
	trusting := func(c *v1alpha1.TalosCluster, clientID string) *v1alpha1.TalosCluster {
		c.Spec.Authentication = &v1alpha1.ClusterAuthentication{IssuerURL: "https://idp.example.net", ClientID: clientID}
		return c
	}
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.authentication.clientID") || !strings.Contains(err.Error(), "managementAudiences") {
			t.Errorf("%s: want Invalid on spec.authentication.clientID naming managementAudiences, got %v", what, err)
		}
	}

	// Ichor's own default audience counts whatever the installation says.
	for _, id := range []string{"ichor", "ichor-ui"} {
		_, err := clusters.Create(ctx, trusting(apiTalosCluster("trusts-"+id, ns), id), metav1.CreateOptions{})
		refused("create trusting "+id, err)
	}
	c, err := clusters.Create(ctx, apiTalosCluster("own-client", ns), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = clusters.UpdateAuthentication(ctx, c.Name, trusting(c.DeepCopy(), "ichor-ui"), metav1.UpdateOptions{})
	refused("authentication subresource to ichor-ui", err)
	if c, err = clusters.UpdateAuthentication(ctx, c.Name, trusting(c.DeepCopy(), "kubernetes"), metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the cluster's own client: %v", err)
	}

	// Declaring the cluster's audience a management one is refused, naming
	// the cluster; nothing of the settings changes.
	installations := apiClient(t).IchorV1alpha1().IchorInstallations()
	in, err := installations.Get(ctx, v1alpha1.InstallationName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in.Spec.Settings.ManagementAudiences = []string{"ichor-ui", "kubernetes"}
	_, err = installations.UpdateSettings(ctx, in.Name, in, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), ns+"/own-client (kubernetes)") {
		t.Errorf("an installation declaring a cluster's audience: want Invalid naming %s/own-client, got %v", ns, err)
	}
	if in, err = installations.Get(ctx, v1alpha1.InstallationName, metav1.GetOptions{}); err != nil || len(in.Spec.Settings.ManagementAudiences) != 1 {
		t.Errorf("the refused settings were stored: %v %v", in.Spec.Settings.ManagementAudiences, err)
	}
}
