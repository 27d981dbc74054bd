package api

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

// TestManagedClustersTrustNoManagementAudience: an admin who has a managed
// cluster trust an audience the management plane accepts would let that
// cluster's kube-apiserver (its root, its own admins) capture Ichor
// people's tokens and replay them to the management plane. Each way there
// is refused: on create, through the authentication subresource, and by
// declaring a cluster's audience a management one afterwards.
func TestManagedClustersTrustNoManagementAudience(t *testing.T) {
	ctx := itest.APIContext(t)
	ns := itest.CP.Namespace(t)
	itest.UseSettings(ctx, t, func(s *v1alpha1.InstallationSettings) { s.ManagementAudiences = []string{"ichor-ui"} })
	clusters := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().TalosClusters(ns)
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
		_, err := clusters.Create(ctx, trusting(itest.APITalosCluster("trusts-"+id, ns), id), metav1.CreateOptions{})
		refused("create trusting "+id, err)
	}
	c, err := clusters.Create(ctx, itest.APITalosCluster("own-client", ns), metav1.CreateOptions{})
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
	installations := itest.APIClient(t).IchorV1alpha1().IchorInstallations()
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

// TestOneMachinePerNodeAddress: an operator of one namespace, a tenant,
// would create a TalosMachine at the address of another tenant's node, to
// pin it the next time it enters maintenance mode. Once a machine holds an
// address (it pinned the certificate there, or was approved), a second
// machine there is refused in any namespace, whatever the address's
// spelling, to admins too, and the refusal does not name the other
// tenant's machine. Tenants' own networks keep each to its addresses.
func TestOneMachinePerNodeAddress(t *testing.T) {
	ctx := itest.APIContext(t)
	victim, tenant := itest.CP.Namespace(t), itest.CP.Namespace(t)
	itest.UseSettings(ctx, t, func(s *v1alpha1.InstallationSettings) {
		s.ProvisioningNetworks = []string{"10.6.0.0/24"}
		s.NamespaceProvisioningNetworks = []v1alpha1.NamespaceProvisioningNetworks{{Namespace: tenant, Networks: []string{"10.6.0.0/24", "10.7.0.0/24"}}}
	})
	admin := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1()
	held := itest.APITalosMachine("held", victim, "alpha")
	held.Spec.Address = "10.6.0.200:50000"
	m, err := admin.TalosMachines(victim).Create(ctx, held, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// ichor-controller pinned the certificate the node presented there.
	m.Status.Maintenance = &v1alpha1.MaintenanceStatus{CertificateFingerprint: "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=", SeenAt: metav1.Now()}
	if _, err := itest.APIClient(t).IchorV1alpha1().TalosMachines(victim).UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Admission answers from the API server's informer (the package says
	// so): wait, by dry run, until it has seen the pinned certificate.
	probe := itest.APITalosMachine("probe", victim, "alpha")
	probe.Spec.Address = held.Spec.Address
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := admin.TalosMachines(victim).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: itest.APIDryRun})
		return apierrors.IsForbidden(err), nil
	}); err != nil {
		t.Fatalf("admission never saw the address held: %v", err)
	}

	operator := itest.APIClientFor(t, itest.OperatorClient(t)).IchorV1alpha1()
	for _, c := range []struct {
		who, ns, address string
	}{
		{"an operator of another namespace", tenant, "10.6.0.200:50000"},
		{"the same, spelt as an IPv4-mapped IPv6 address", tenant, "[::ffff:10.6.0.200]:50000"},
		{"the same, without the default port", tenant, "10.6.0.200"},
	} {
		claim := itest.APITalosMachine("claim", c.ns, "alpha")
		claim.Spec.Address = c.address
		_, err := operator.TalosMachines(c.ns).Create(ctx, claim, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "a TalosMachine in another namespace holds the node") || strings.Contains(err.Error(), "held") {
			t.Errorf("%s at %s: want Forbidden naming no machine, got %v", c.who, c.address, err)
		}
	}
	// An admin too, and in the holder's own namespace the holder is named.
	second := itest.APITalosMachine("second", victim, "alpha")
	second.Spec.Address = "10.6.0.200:50000"
	if _, err := admin.TalosMachines(victim).Create(ctx, second, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "TalosMachine held holds the node") {
		t.Errorf("an admin's second machine at a held address: want Forbidden naming held, got %v", err)
	}
	// Moving a machine there is a claim too.
	free := itest.APITalosMachine("free", tenant, "alpha")
	free.Spec.Address = "10.6.0.201:50000"
	moved, err := operator.TalosMachines(tenant).Create(ctx, free, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	moved.Spec.Address = "10.6.0.200:50000"
	if _, err := operator.TalosMachines(tenant).Update(ctx, moved, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("moving a machine to a held address: want Forbidden, got %v", err)
	}

	// The tenant's own networks: 10.7.0.0/24 is the tenant's, not the victim's.
	for _, c := range []struct {
		ns, address string
		ok          bool
	}{{tenant, "10.7.0.9:50000", true}, {victim, "10.7.0.9:50001", false}} {
		m := itest.APITalosMachine("net-"+strings.ReplaceAll(strings.ReplaceAll(c.address, ".", "-"), ":", "-"), c.ns, "alpha")
		m.Spec.Address = c.address
		_, err := operator.TalosMachines(c.ns).Create(ctx, m, metav1.CreateOptions{})
		if c.ok != (err == nil) || !c.ok && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "namespaceProvisioningNetworks")) {
			t.Errorf("an operator's machine at %s in %s: ok %v, got %v", c.address, c.ns, c.ok, err)
		}
	}
}
