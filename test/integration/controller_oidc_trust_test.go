package integration

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
func (d *demoCluster) oidcTrust(t *testing.T) {
	ctx := d.ctx
	ca, err := os.ReadFile(cp.OIDC.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	before, rebootsBefore, since := d.appliedHashes(t), d.reboots(), time.Now().Truncate(time.Second)
	trust := func(clientID string) []string {
		body, err := json.Marshal(map[string]any{"spec": map[string]any{"authentication": v1alpha1.ClusterAuthentication{
			IssuerURL: cp.OIDC.URL, ClientID: clientID, CABundle: string(ca)}}})
		if err != nil {
			t.Fatal(err)
		}
		return []string{"-n", d.ns, "patch", "taloscluster", "demo", "--subresource=authentication", "--type=merge", "-p", string(body)}
	}
	set := trust(oidcprovider.ClusterClientID)
	if out, err := cp.Kubectl(ctx, append(operator, set...)...); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("an operator set the cluster's OIDC trust: %v\n%s", err, out)
	}
	// The CLI's client is an audience the management plane accepts: demo
	// would see tokens that sign in to Ichor.
	if out, err := cp.Kubectl(ctx, append(admin, trust(oidcprovider.ClientID)...)...); err == nil || !strings.Contains(out+err.Error(), "managementAudiences") {
		t.Fatalf("an admin had demo trust the management plane's audience: %v\n%s", err, out)
	}
	mustKubectl(ctx, t, append(admin, set...)...)

	// Control planes take it, one at a time; workers keep their config.
	type window struct {
		name          string
		applied, back time.Time
	}
	var windows []window
	for name, role := range d.roles {
		if role != v1alpha1.MachineRoleControlPlane {
			continue
		}
		m := waitMachineFor(ctx, t, d.ns, name, clusterWait, "the OIDC trust is rolled out", func(m *v1alpha1.TalosMachine) bool {
			return m.Status.AppliedConfig != nil && m.Status.AppliedConfig.Hash != before[name] &&
				hasCondition(m.Status.Conditions, v1alpha1.MachineConditionConfigApplied, metav1.ConditionTrue, v1alpha1.MachineReasonUpToDate) &&
				m.Status.Phase == v1alpha1.MachinePhaseReady
		})
		if m.Status.AppliedConfig.Effect != v1alpha1.ConfigEffectAPIServerRestart {
			t.Errorf("%s took the OIDC trust as %s, want APIServerRestart", name, m.Status.AppliedConfig.Effect)
		}
		ready := conditionOf(m, v1alpha1.MachineConditionReady)
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
	after := d.appliedHashes(t)
	for name, role := range d.roles {
		if role == v1alpha1.MachineRoleWorker && after[name] != before[name] {
			t.Errorf("worker %s's config changed with the cluster's OIDC trust", name)
		}
	}
	if got := d.reboots(); fmt.Sprint(got) != fmt.Sprint(rebootsBefore) {
		t.Errorf("reboots went from %v to %v", rebootsBefore, got)
	}

	// olga signs in at the provider and reaches demo with plain kubectl.
	p := newPerson(t, d.ns)
	olga := oidcPerson(t, "olga")
	// Once with the CLI's client, to Ichor; once with the client demo
	// trusts, leaving the kubeconfig as it is.
	for _, args := range [][]string{{"--client-id", oidcprovider.ClientID}, {"--client-id", oidcprovider.ClusterClientID, "--no-kubeconfig"}} {
		login := p.startIchor(ctx, t, append([]string{"login", "--oidc", "--issuer", cp.OIDC.URL, "--issuer-certificate-authority", cp.OIDC.CAFile, "--no-browser"}, args...)...)
		signInAtProvider(ctx, t, login.await(t, regexp.MustCompile(`https://\S+/auth\?\S+`)), olga)
		login.wait(t).ok(t, "ichor login --oidc "+strings.Join(args, " "))
	}
	if r := p.ichor(ctx, t, nil, "-n", d.ns, "kubeconfig", "demo", "--username", "nobody@example.com"); r.code == 0 ||
		!strings.Contains(r.stderr, "is not signed in") || !strings.Contains(r.stderr, "ichor login --oidc --issuer "+cp.OIDC.URL) {
		t.Errorf("ichor kubeconfig for someone not signed in: %+v", r)
	}
	p.ichor(ctx, t, nil, "-n", d.ns, "kubeconfig", "demo", "--username", olga.Email).ok(t, "ichor kubeconfig", "oidc:"+olga.Email+"@"+d.ns+"/demo")
	demo := []string{"--context", "oidc:" + olga.Email + "@" + d.ns + "/demo"}
	who := p.whoamiIn(ctx, t, demo...)
	if who.Username != "oidc:"+olga.Email || !slices.Contains(who.Groups, "oidc:ichor-operator") {
		t.Fatalf("kubectl auth whoami in demo: %+v", who)
	}
	if out, err := p.kubectl(ctx, append(demo, "get", "pods", "-n", "kube-system")...); err == nil || !strings.Contains(out, "Forbidden") {
		t.Fatalf("olga read demo's pods before demo's RBAC let her: %v\n%s", err, out)
	}
	// demo's admin lets the provider's operators read pods (a role of its
	// own: the simulated cluster runs no ClusterRole aggregation for view).
	rc, _ := d.bootstrapAccess(t)
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
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, controllerWait, true, func(ctx context.Context) (bool, error) {
		var err error
		out, err = p.kubectl(ctx, append(demo, "get", "pods", "-n", "kube-system")...)
		return err == nil, nil
	}); err != nil {
		t.Errorf("olga reads demo's pods as its RBAC lets oidc:ichor-operator: %v\n%s", err, out)
	}
	if out, _ := p.kubectl(ctx, append(demo, "auth", "can-i", "delete", "pods", "-n", "kube-system")...); lastLine(out) != "no" {
		t.Errorf("olga may delete pods in demo: %s", out)
	}

	// pat's provider says system:masters: in demo that is oidc:system:masters, which nothing binds.
	q := newPerson(t, d.ns)
	pat := oidcPerson(t, "pat")
	// Once with the CLI's client, for the management plane; once with the
	// client demo trusts.
	for _, args := range [][]string{{"--client-id", oidcprovider.ClientID}, {"--client-id", oidcprovider.ClusterClientID, "--no-kubeconfig"}} {
		device := q.startIchor(ctx, t, append([]string{"login", "--oidc", "--device", "--issuer", cp.OIDC.URL, "--issuer-certificate-authority", cp.OIDC.CAFile}, args...)...)
		confirmDevice(ctx, t, strings.TrimSpace(device.await(t, regexp.MustCompile(`(?m)^\s+([A-Z0-9]{4}-[A-Z0-9]{4})\s*$`))), pat)
		device.wait(t).ok(t, "ichor login --oidc --device "+strings.Join(args, " "))
	}
	// pat holds no Ichor role, so cannot read demo's TalosCluster: olga's
	// kubeconfig entry for demo, which holds no secret, serves with pat's user.
	cfg, err := clientcmd.LoadFromFile(p.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	user := cfg.AuthInfos[cfg.Contexts[demo[1]].AuthInfo].DeepCopy()
	user.Exec.Args = []string{"auth", "token", "--oidc", "--issuer", cp.OIDC.URL, "--client-id", oidcprovider.ClusterClientID, "--username", pat.Email}
	patCfg, err := clientcmd.LoadFromFile(q.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	patCfg.Clusters["demo"] = cfg.Clusters[d.ns+"/demo"]
	patCfg.AuthInfos["pat-demo"] = user
	patCfg.Contexts["pat-demo"] = &clientcmdapi.Context{Cluster: "demo", AuthInfo: "pat-demo"}
	if err := clientcmd.WriteToFile(*patCfg, q.kubeconfig); err != nil {
		t.Fatal(err)
	}
	if r := q.ichor(ctx, t, nil, "-n", d.ns, "kubeconfig", "demo", "--username", pat.Email); r.code == 0 || !strings.Contains(r.stderr, "forbidden") {
		t.Errorf("ichor kubeconfig without a role to read the TalosCluster: %+v", r)
	}
	patDemo := []string{"--context", "pat-demo"}
	who = q.whoamiIn(ctx, t, patDemo...)
	if slices.Contains(who.Groups, "system:masters") || !slices.Contains(who.Groups, "oidc:system:masters") {
		t.Errorf("pat's groups in demo: %v", who.Groups)
	}
	if out, err := q.kubectl(ctx, append(patDemo, "get", "pods", "-n", "kube-system")...); err == nil || !strings.Contains(out, "Forbidden") {
		t.Errorf("pat read demo's pods through a provider group named system:masters: %v\n%s", err, out)
	}
}

// oidcPerson is the harness's OpenID provider's person of that name.
func oidcPerson(t *testing.T, name string) oidcprovider.Person {
	t.Helper()
	for _, p := range oidcprovider.People {
		if p.Username == name {
			return p
		}
	}
	t.Fatalf("no person %s", name)
	return oidcprovider.Person{}
}
