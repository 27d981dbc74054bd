package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/oidcprovider"
)

// oidcTrust: an admin has demo trust the company's OpenID provider
// (talosclusters/authentication; an operator may not). The control planes
// restart kube-apiserver with it one at a time, each back before the next
// starts, without a reboot; workers are not touched. Then a person signed
// in at the provider with `ichor login --oidc` adds demo to their
// kubeconfig with `ichor kubeconfig` and reaches it with plain kubectl as
// oidc:<email>, in oidc: groups, as demo's own RBAC allows, and no more: a
// provider group named system:masters is oidc:system:masters there.
func (d *DemoCluster) OIDCTrust(t *testing.T) {
	ctx := d.Ctx
	ca, err := os.ReadFile(CP.OIDC.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	before, rebootsBefore, since := d.AppliedHashes(t), d.Reboots(), time.Now().Truncate(time.Second)
	trust := func(clientID string) []string {
		body, err := json.Marshal(map[string]any{"spec": map[string]any{"authentication": v1alpha1.ClusterAuthentication{
			IssuerURL: CP.OIDC.URL, ClientID: clientID, CABundle: string(ca)}}})
		if err != nil {
			t.Fatal(err)
		}
		return []string{"-n", d.Ns, "patch", "taloscluster", "demo", "--subresource=authentication", "--type=merge", "-p", string(body)}
	}
	set := trust(oidcprovider.ClusterClientID)
	if out, err := CP.Kubectl(ctx, append(Operator, set...)...); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("an operator set the cluster's OIDC trust: %v\n%s", err, out)
	}
	// The CLI's client is an audience the management plane accepts: demo
	// would see tokens that sign in to Ichor.
	if out, err := CP.Kubectl(ctx, append(Admin, trust(oidcprovider.ClientID)...)...); err == nil || !strings.Contains(out+err.Error(), "managementAudiences") {
		t.Fatalf("an admin had demo trust the management plane's audience: %v\n%s", err, out)
	}
	MustKubectl(ctx, t, append(Admin, set...)...)

	// Control planes take it, one at a time; workers keep their config.
	type window struct {
		name          string
		applied, back time.Time
	}
	var windows []window
	for name, role := range d.Roles {
		if role != v1alpha1.MachineRoleControlPlane {
			continue
		}
		m := WaitMachineFor(ctx, t, d.Ns, name, ClusterWait, "the OIDC trust is rolled out", func(m *v1alpha1.TalosMachine) bool {
			return m.Status.AppliedConfig != nil && m.Status.AppliedConfig.Hash != before[name] &&
				HasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate) &&
				m.Status.Phase == v1alpha1.MachinePhaseReady
		})
		if m.Status.AppliedConfig.Effect != v1alpha1.ConfigEffectAPIServerRestart {
			t.Errorf("%s took the OIDC trust as %s, want APIServerRestart", name, m.Status.AppliedConfig.Effect)
		}
		ready := ConditionOf(m, v1alpha1.MachineConditionReady)
		windows = append(windows, window{name, m.Status.AppliedConfig.AppliedAt.Time, ready.LastTransitionTime.Time})
	}
	slices.SortFunc(windows, func(a, b window) int { return a.applied.Compare(b.applied) })
	// The first one's kube-apiserver restarted for real: it was away.
	if first := windows[0]; first.back.Before(first.applied) || first.back.Before(since) {
		t.Errorf("%s never waited for its kube-apiserver: took the change at %s, Ready since %s", first.name, first.applied, first.back)
	}
	for i := 1; i < len(windows); i++ {
		if prev := windows[i-1]; windows[i].applied.Before(prev.back) {
			t.Errorf("%s took the change at %s, before %s was back (%s): more than one kube-apiserver restarted at once",
				windows[i].name, windows[i].applied, prev.name, prev.back)
		}
	}
	after := d.AppliedHashes(t)
	for name, role := range d.Roles {
		if role == v1alpha1.MachineRoleWorker && after[name] != before[name] {
			t.Errorf("worker %s's config changed with the cluster's OIDC trust", name)
		}
	}
	if got := d.Reboots(); fmt.Sprint(got) != fmt.Sprint(rebootsBefore) {
		t.Errorf("reboots went from %v to %v", rebootsBefore, got)
	}

	// olga signs in at the provider and reaches demo with plain kubectl.
	p := NewPerson(t, d.Ns)
	olga := OIDCPerson(t, "olga")
	// Once with the CLI's client, to Ichor; once with the client demo
	// trusts, leaving the kubeconfig as it is.
	for _, args := range [][]string{{"--client-id", oidcprovider.ClientID}, {"--client-id", oidcprovider.ClusterClientID, "--no-kubeconfig"}} {
		login := p.StartIchor(ctx, t, append([]string{"login", "--oidc", "--issuer", CP.OIDC.URL, "--issuer-certificate-authority", CP.OIDC.CAFile, "--no-browser"}, args...)...)
		SignInAtProvider(ctx, t, login.Await(t, regexp.MustCompile(`https://\S+/auth\?\S+`)), olga)
		login.Wait(t).Ok(t, "ichor login --oidc "+strings.Join(args, " "))
	}
	if r := p.Ichor(ctx, t, nil, "-n", d.Ns, "kubeconfig", "demo", "--username", "nobody@example.com"); r.Code == 0 ||
		!strings.Contains(r.Stderr, "is not signed in") || !strings.Contains(r.Stderr, "ichor login --oidc --issuer "+CP.OIDC.URL) {
		t.Errorf("ichor kubeconfig for someone not signed in: %+v", r)
	}
	p.Ichor(ctx, t, nil, "-n", d.Ns, "kubeconfig", "demo", "--username", olga.Email).Ok(t, "ichor kubeconfig", "oidc:"+olga.Email+"@"+d.Ns+"/demo")
	demo := []string{"--context", "oidc:" + olga.Email + "@" + d.Ns + "/demo"}
	who := p.WhoamiIn(ctx, t, demo...)
	if who.Username != "oidc:"+olga.Email || !slices.Contains(who.Groups, "oidc:ichor-operator") {
		t.Fatalf("kubectl auth whoami in demo: %+v", who)
	}
	if out, err := p.Kubectl(ctx, append(demo, "get", "pods", "-n", "kube-system")...); err == nil || !strings.Contains(out, "Forbidden") {
		t.Fatalf("olga read demo's pods before demo's RBAC let her: %v\n%s", err, out)
	}
	// demo's admin lets the provider's operators read pods (a role of its
	// own: the simulated cluster runs no ClusterRole aggregation for view).
	rc, _ := d.BootstrapAccess(t)
	rbac := kubernetes.NewForConfigOrDie(rc).RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "operators-read-pods"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "oidc:ichor-operator"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var out string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, ControllerWait, true, func(ctx context.Context) (bool, error) {
		var err error
		out, err = p.Kubectl(ctx, append(demo, "get", "pods", "-n", "kube-system")...)
		return err == nil, nil
	}); err != nil {
		t.Errorf("olga reads demo's pods as its RBAC lets oidc:ichor-operator: %v\n%s", err, out)
	}
	if out, _ := p.Kubectl(ctx, append(demo, "auth", "can-i", "delete", "pods", "-n", "kube-system")...); LastLine(out) != "no" {
		t.Errorf("olga may delete pods in demo: %s", out)
	}

	// pat's provider says system:masters: in demo that is oidc:system:masters, which nothing binds.
	q := NewPerson(t, d.Ns)
	pat := OIDCPerson(t, "pat")
	// Once with the CLI's client, for the management plane; once with the
	// client demo trusts.
	for _, args := range [][]string{{"--client-id", oidcprovider.ClientID}, {"--client-id", oidcprovider.ClusterClientID, "--no-kubeconfig"}} {
		device := q.StartIchor(ctx, t, append([]string{"login", "--oidc", "--device", "--issuer", CP.OIDC.URL, "--issuer-certificate-authority", CP.OIDC.CAFile}, args...)...)
		ConfirmDevice(ctx, t, strings.TrimSpace(device.Await(t, regexp.MustCompile(`(?m)^\s+([A-Z0-9]{4}-[A-Z0-9]{4})\s*$`))), pat)
		device.Wait(t).Ok(t, "ichor login --oidc --device "+strings.Join(args, " "))
	}
	// pat holds no Ichor role, so cannot read demo's TalosCluster: olga's
	// kubeconfig entry for demo, which holds no secret, serves with pat's user.
	cfg, err := clientcmd.LoadFromFile(p.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	user := cfg.AuthInfos[cfg.Contexts[demo[1]].AuthInfo].DeepCopy()
	user.Exec.Args = []string{"auth", "token", "--oidc", "--issuer", CP.OIDC.URL, "--client-id", oidcprovider.ClusterClientID, "--username", pat.Email}
	patCfg, err := clientcmd.LoadFromFile(q.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	patCfg.Clusters["demo"] = cfg.Clusters[d.Ns+"/demo"]
	patCfg.AuthInfos["pat-demo"] = user
	patCfg.Contexts["pat-demo"] = &clientcmdapi.Context{Cluster: "demo", AuthInfo: "pat-demo"}
	if err := clientcmd.WriteToFile(*patCfg, q.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	if r := q.Ichor(ctx, t, nil, "-n", d.Ns, "kubeconfig", "demo", "--username", pat.Email); r.Code == 0 || !strings.Contains(r.Stderr, "forbidden") {
		t.Errorf("ichor kubeconfig without a role to read the TalosCluster: %+v", r)
	}
	patDemo := []string{"--context", "pat-demo"}
	who = q.WhoamiIn(ctx, t, patDemo...)
	if slices.Contains(who.Groups, "system:masters") || !slices.Contains(who.Groups, "oidc:system:masters") {
		t.Errorf("pat's groups in demo: %v", who.Groups)
	}
	if out, err := q.Kubectl(ctx, append(patDemo, "get", "pods", "-n", "kube-system")...); err == nil || !strings.Contains(out, "Forbidden") {
		t.Errorf("pat read demo's pods through a provider group named system:masters: %v\n%s", err, out)
	}
}

// OIDCPerson is the harness's OpenID provider's person of that name.
func OIDCPerson(t *testing.T, name string) oidcprovider.Person {
	t.Helper()
	for _, p := range oidcprovider.People {
		if p.Username == name {
			return p
		}
	}
	t.Fatalf("no person %s", name)
	return oidcprovider.Person{}
}
