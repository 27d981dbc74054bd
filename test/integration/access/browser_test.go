package access

import (
	"archive/zip"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	authcmd "ichor.dev/ichor/pkg/cmd/auth"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	uicmd "ichor.dev/ichor/pkg/cmd/ui"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/integration/itest"
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/oidcprovider"
	"ichor.dev/ichor/test/talossim"
)

// TestConsoleInABrowser: the console in a real headless Chromium, against a
// cluster the controller builds on simulated nodes. A viewer sees a pending
// machine, is offered nothing, and is refused a download with the server's
// reason; an admin compares the pinned fingerprint and approves the
// machine; an operator creates a reboot, confirms what it will do, and
// watches its progress move without a reload until it succeeds; an admin
// downloads a support bundle, streamed as herself. ichor-apiserver's audit
// names each person for each action, never ichor-ui. Screenshots of each
// page go to .local/screenshots/.
func TestConsoleInABrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	itest.InstallControllerRBAC(ctx, t)
	itest.UseProvisioningNetworks(ctx, t, "127.0.13.0/24")
	ns := itest.CP.Namespace(t)
	itest.BindControllerSecrets(ctx, t, ns)
	controller := itest.RunController(t, func(o *ctrlcmd.Options) {
		o.MachineRecheckInterval = time.Second
		o.MachineHealthInterval = 2 * time.Second
		o.MachineContactTimeout = 5 * time.Second
		o.OperationPollInterval = 250 * time.Millisecond
		o.OperationStepTimeout = itest.OperationStepTimeout
	})
	itest.WaitHTTP(ctx, t, "http://"+controller.Probes+"/readyz")

	itest.UseUsersEnabled(ctx, t, true)
	// Plain names (IchorUsers are cluster-wide; no other test makes these),
	// so that the screenshots read as a person would see them.
	ada, otto, vera := "ada", "otto", "vera"
	passwords := map[string]string{ada: "ada's long passphrase", otto: "otto's long passphrase", vera: "vera's long passphrase"}
	itest.CreateUser(ctx, t, ada, v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleAdmin}, passwords[ada])
	itest.CreateUser(ctx, t, otto, v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleOperator}, passwords[otto])
	itest.CreateUser(ctx, t, vera, v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleViewer}, passwords[vera])
	itest.RunAuth(t, func(o *authcmd.Options) { o.TokenLifetime = 10 * time.Minute })
	itest.WaitIssuerTrusted(t, vera, passwords[vera])
	ui := itest.RunUI(t, func(o *uicmd.Options) {
		o.OIDCIssuerURL, o.OIDCClientID, o.OIDCCAFile, o.OIDCName = itest.CP.OIDC.URL, oidcprovider.ConsoleClientID, itest.CP.OIDC.CAFile, "the company's provider"
	})

	// The cluster web: a control plane an admin approved with kubectl, and
	// a worker waiting for a person's decision.
	binDir, err := harness.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kube := &talossim.Kubernetes{BinDir: binDir, Dir: t.TempDir(), Logf: t.Logf}
	t.Cleanup(kube.Stop)
	itest.KeepLogsOnFailure(t, kube.Dir)
	const endpointIP = "127.0.13.100"
	ports, err := proc.FreePorts(endpointIP, 1)
	if err != nil {
		t.Fatal(err)
	}
	etcd, trustd := &talossim.EtcdCluster{Name: "web"}, talossim.NewTrustd()
	node := func(addr string) *talossim.Node {
		return itest.SimNode(t, talossim.Options{ListenAddress: addr, Kubernetes: kube, Etcd: etcd, Trustd: trustd,
			InstallDelay: 100 * time.Millisecond, RebootDelay: 200 * time.Millisecond})
	}
	cp1, worker1 := node("127.0.13.1:0"), node("127.0.13.2:0")
	itest.MustApply(ctx, t, fmt.Sprintf(`apiVersion: ichor.dev/v1alpha1
kind: TalosCluster
metadata: {name: web, namespace: %[1]s}
spec:
  talosVersion: v1.13.0
  kubernetesVersion: v1.36.0
  controlPlane: {endpoint: "https://%[2]s:%[3]d"}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: cp-1, namespace: %[1]s}
spec: {clusterName: web, role: controlplane, address: "%[4]s", hostname: cp-1, install: {disk: /dev/sda}}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosMachine
metadata: {name: worker-1, namespace: %[1]s}
spec: {clusterName: web, role: worker, address: "%[5]s", hostname: worker-1, install: {disk: /dev/sda}}
---
apiVersion: ichor.dev/v1alpha1
kind: TalosConfigPatch
metadata: {name: sysctls, namespace: %[1]s}
spec:
  clusterName: web
  patch: |
    machine:
      sysctls:
        net.core.somaxconn: "65535"
`, ns, endpointIP, ports[0], cp1.Addr(), worker1.Addr()))
	itest.WaitMachine(ctx, t, ns, "cp-1", "pinned", itest.PinnedTo(cp1.MaintenanceFingerprint()))
	itest.MustKubectl(ctx, t, append(itest.Admin, "-n", ns, "patch", "talosmachine", "cp-1", "--subresource=approval", "--type=merge",
		"-p", `{"status":{"approval":{"decision":"Approved"}}}`)...)
	itest.WaitMachine(ctx, t, ns, "worker-1", "pinned", itest.PinnedTo(worker1.MaintenanceFingerprint()))

	chrome := itest.Chromium(t, ui)
	clusterPath := "/clusters/" + ns + "/web"
	bundlePath := clusterPath + "/machines/cp-1/downloads/support-bundle"

	t.Run("a viewer sees the pending machine, is offered nothing, and is refused a download with the server's reason", func(t *testing.T) {
		p := itest.NewVisitor(t, chrome, ui, vera)
		p.SignIn(vera, passwords[vera])
		p.Screenshot("clusters")
		p.Open(clusterPath)
		if got := p.Text("#machine-worker-1"); !strings.Contains(got, "pending") || !strings.Contains(got, worker1.MaintenanceFingerprint()) {
			t.Errorf("worker-1's row for a viewer: %q", got)
		}
		if n, err := chromedp.Run(p.Ctx, chromedp.Evaluate[int](`document.querySelectorAll("form.decide, a.download").length`)); err != nil || n != 0 {
			t.Errorf("a viewer is offered %d approvals or downloads (%v)", n, err)
		}
		p.Open(bundlePath)
		if got := p.Text(`[role="alert"]`); !strings.Contains(got, "forbidden") || !strings.Contains(got, "ichor:"+vera) || !strings.Contains(got, "support-bundle") {
			t.Errorf("a viewer's download: %q", got)
		}
		p.Screenshot("viewer-refused")
	})

	t.Run("an admin compares the pinned fingerprint and approves the machine", func(t *testing.T) {
		p := itest.NewVisitor(t, chrome, ui, ada)
		p.SignIn(ada, passwords[ada])
		p.Open(clusterPath)
		if got := p.Text("#machine-worker-1 .fingerprint"); got != worker1.MaintenanceFingerprint() {
			t.Fatalf("the fingerprint beside worker-1: %q, the machine's console shows %q", got, worker1.MaintenanceFingerprint())
		}
		p.Screenshot("cluster-pending")
		p.Do("approve worker-1",
			chromedp.SendKeys(chromedp.CSS(`#machine-worker-1 input[name="reason"]`), "fingerprint matches the console"),
			chromedp.Click(chromedp.CSS(`#machine-worker-1 button[value="Approved"]`)),
			// The page after the approval offers it no more.
			chromedp.WaitNotPresent(chromedp.CSS(`#machine-worker-1 form.decide`)),
		)
		if got := p.Text("#machine-worker-1"); !strings.Contains(got, "Approved by ichor:"+ada+": fingerprint matches the console") {
			t.Errorf("worker-1 after the approval: %q", got)
		}
		m, err := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns).Get(ctx, "worker-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := m.Status.Approval; a == nil || a.Decision != v1alpha1.ApprovalApproved || a.By != "ichor:"+ada {
			t.Fatalf("worker-1's approval: %+v", a)
		}
		itest.WaitCluster(ctx, t, ns, "web", v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
		for _, name := range []string{"cp-1", "worker-1"} {
			itest.WaitMachine(ctx, t, ns, name, "Ready", func(m *v1alpha1.TalosMachine) bool { return m.Status.Phase == v1alpha1.MachinePhaseReady })
		}
		p.Open(clusterPath)
		p.Screenshot("cluster")
	})

	t.Run("an operator reboots a worker after a confirmation, and watches it without a reload", func(t *testing.T) {
		p := itest.NewVisitor(t, chrome, ui, otto)
		p.SignIn(otto, passwords[otto])
		p.Open(clusterPath + "/operations")
		p.Do("create a reboot of worker-1",
			chromedp.SetValue(chromedp.CSS(`select[name="type"]`), string(v1alpha1.OperationReboot)),
			chromedp.SendKeys(chromedp.CSS(`input[name="name"]`), "reboot-worker-1"),
			chromedp.Click(chromedp.CSS(`input[name="machines"][value="worker-1"]`)),
			chromedp.Click(chromedp.CSS(`form.operation button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS("#progress")),
		)
		if got := p.Text("#progress .phase"); got != "Pending" {
			t.Errorf("a new operation's phase: %q", got)
		}
		// Followed as a person clicks it; a click through DevTools could
		// race the live stream's next rendering of the progress.
		p.Do("open the confirmation",
			chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
				_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.querySelector("#progress a.start").click(), true)`))
				return err
			}),
			chromedp.WaitVisible(chromedp.CSS("form.start")))
		if got := p.Text(".confirm"); got != "Starting it reboots worker-1 of cluster web, one machine at a time." {
			t.Errorf("the confirmation says %q", got)
		}
		p.Screenshot("operation-confirm")
		p.Do("start", chromedp.Click(chromedp.CSS(`form.start button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#progress")))
		// A reload would lose this mark: the progress below must arrive
		// through the page's live stream.
		p.Do("mark the page", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.ichorStillThisPage = true`))
			return err
		}))
		before := p.Text("#progress .summary .phase")
		if _, err := chromedp.Run(p.Ctx, chromedp.Poll[bool](
			`["Succeeded", "Failed"].includes(document.querySelector("#progress .summary .phase")?.textContent)`,
			chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(3*time.Minute))); err != nil {
			t.Fatalf("the reboot never ended on the page: %v\n%s", err, p.Text("#progress"))
		}
		if got := p.Text("#progress .summary .phase"); got != string(v1alpha1.OperationSucceeded) {
			t.Errorf("the operation's phase on the page: %q (it was %q when started)\n%s", got, before, p.Text("#progress"))
		}
		if got := p.Text("#progress .steps tbody"); !strings.Contains(got, "worker-1") || !strings.Contains(got, "Succeeded") {
			t.Errorf("the steps on the page: %q", got)
		}
		if still, err := chromedp.Run(p.Ctx, chromedp.Evaluate[bool](`window.ichorStillThisPage === true`)); err != nil || !still {
			t.Errorf("the page was reloaded to show the progress (%v)", err)
		}
		if n, err := chromedp.Run(p.Ctx, chromedp.Evaluate[int](`document.querySelectorAll("#progress a.start").length`)); err != nil || n != 0 {
			t.Errorf("a started operation still offers %d starts (%v)", n, err)
		}
		if !strings.Contains(p.Text("#progress"), "started by ichor:"+otto) {
			t.Errorf("the progress does not name who started it: %q", p.Text("#progress"))
		}
		p.Screenshot("operation")
		op, err := itest.APIClient(t).IchorV1alpha1().TalosOperations(ns).Get(ctx, "reboot-worker-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if op.Status.Phase != v1alpha1.OperationSucceeded || op.Status.StartedBy != "ichor:"+otto {
			t.Errorf("the operation: %s started by %q", op.Status.Phase, op.Status.StartedBy)
		}
		p.Open(clusterPath + "/operations")
		p.Screenshot("operations")
	})

	t.Run("an admin downloads a support bundle, streamed as herself", func(t *testing.T) {
		p := itest.NewVisitor(t, chrome, ui, ada)
		p.SignIn(ada, passwords[ada])
		p.Open(clusterPath)
		dir := t.TempDir()
		progress := chromedp.Events(p.Ctx, cdpbrowser.DownloadProgress)
		p.Do("download cp-1's support bundle",
			chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
				_, err := chromedp.Call(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
					Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: new(true),
					BrowserContextID: chromedp.FromContext(ctx).BrowserContextID,
				})
				return err
			}),
			chromedp.Click(chromedp.CSS(`#machine-cp-1 a.download[href$="/support-bundle"]`)),
		)
		var file string
		for ev, err := range progress {
			if err != nil {
				t.Fatalf("the download: %v", err)
			}
			if ev.State == cdpbrowser.DownloadProgressStateCanceled {
				t.Fatal("the browser cancelled the download")
			}
			if ev.State == cdpbrowser.DownloadProgressStateCompleted {
				file = filepath.Join(dir, ev.GUID)
				break
			}
		}
		z, err := zip.OpenReader(file)
		if err != nil {
			t.Fatalf("the support bundle the browser saved is not a zip archive: %v", err)
		}
		defer z.Close() //nolint:errcheck
		if len(z.File) == 0 {
			t.Error("the support bundle is empty")
		}
		itest.WaitEventSaying(ctx, t, ns, "cp-1", corev1.EventTypeNormal, "Downloaded", "ichor:"+ada+" downloaded the support-bundle of TalosMachine cp-1")
		p.Open(clusterPath)
		if got := p.Text("table.events"); !strings.Contains(got, "ichor:"+ada+" downloaded the support-bundle of TalosMachine cp-1") ||
			!strings.Contains(got, "reboot-worker-1") {
			t.Errorf("the cluster's Events on its page: %q", got)
		}
		p.Screenshot("cluster")
	})

	t.Run("an operator reads the config patches without their bodies", func(t *testing.T) {
		p := itest.NewVisitor(t, chrome, ui, otto)
		p.SignIn(otto, passwords[otto])
		p.Open(clusterPath + "/patches")
		if got := p.Text("#patch-sysctls"); !strings.Contains(got, "cluster") || !strings.Contains(got, "every machine") ||
			!strings.Contains(got, "cp-1, worker-1") {
			t.Errorf("the sysctls patch's row: %q", got)
		}
		if body := p.Text("body"); strings.Contains(body, "somaxconn") {
			t.Errorf("the patches page shows a patch's body:\n%s", body)
		}
		p.Screenshot("patches")
		// An operator manages no users: no link, and the server says why.
		if n, err := chromedp.Run(p.Ctx, chromedp.Evaluate[int](`document.querySelectorAll('header a[href="/users"]').length`)); err != nil || n != 0 {
			t.Errorf("an operator is offered the users page (%d, %v)", n, err)
		}
		p.Open("/users")
		if got := p.Text(`[role="alert"]`); !strings.Contains(got, "forbidden") || !strings.Contains(got, "ichor:"+otto) {
			t.Errorf("an operator's users page: %q", got)
		}
	})

	t.Run("an admin creates a user, and disables her; a refused password makes no user", func(t *testing.T) {
		p := itest.NewVisitor(t, chrome, ui, ada)
		p.SignIn(ada, passwords[ada])
		p.Do("open the users page", chromedp.Click(chromedp.CSS(`header a[href="/users"]`)), chromedp.WaitVisible(chromedp.CSS("table.users")))
		users := itest.APIClient(t).IchorV1alpha1().IchorUsers()
		t.Cleanup(func() { _ = users.Delete(context.Background(), "nina", metav1.DeleteOptions{}) })
		create := func(name, password string) {
			p.Do("create "+name,
				chromedp.SendKeys(chromedp.CSS(`form.operation input[name="name"]`), name),
				chromedp.SetValue(chromedp.CSS(`form.operation select[name="role"]`), string(v1alpha1.UserRoleViewer)),
				chromedp.SendKeys(chromedp.CSS(`form.operation input[name="password"]`), password),
				chromedp.Click(chromedp.CSS(`form.operation button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.CSS("h1")),
			)
		}
		create("nora", "short")
		if got := p.Text(`[role="alert"]`); !strings.Contains(got, "nora was not created") {
			t.Errorf("a refused password: %q", got)
		}
		if _, err := users.Get(ctx, "nora", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the user of a refused password: %v, want none", err)
		}
		create("nina", "nina's long passphrase")
		p.Do("see nina", chromedp.WaitVisible(chromedp.CSS("#user-nina")))
		if got := p.Text("#user-nina"); !strings.Contains(got, "viewer") || !strings.Contains(got, "set") || !strings.Contains(got, "enabled") {
			t.Errorf("nina's row: %q", got)
		}
		p.Do("disable nina", chromedp.Click(chromedp.CSS(`#user-nina button[value="true"]`)), chromedp.WaitVisible(chromedp.CSS(`#user-nina button[value="false"]`)))
		if u, err := users.Get(ctx, "nina", metav1.GetOptions{}); err != nil || !u.Spec.Disabled || !u.Status.PasswordSet {
			t.Errorf("nina after the admin's changes: %v %+v %+v", err, u.Spec, u.Status)
		}
		p.Screenshot("users")
		if body := p.Text("body"); strings.Contains(body, "passphrase") {
			t.Errorf("the users page shows a password:\n%s", body)
		}
	})

	t.Run("people of the OpenID provider sign in there; one Kubernetes refuses is told why", func(t *testing.T) {
		signInAtProvider := func(p *itest.Visitor, who oidcprovider.Person) {
			p.Open("/login")
			p.Do("sign in at the provider",
				chromedp.Click(chromedp.CSS(`a.oidc`)),
				chromedp.WaitVisible(chromedp.CSS(`input[name="username"]`)),
				chromedp.SendKeys(chromedp.CSS(`input[name="username"]`), who.Username),
				chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), who.Password),
				chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
			)
		}
		olga := itest.OIDCPerson(t, "olga")
		p := itest.NewVisitor(t, chrome, ui, olga.Email)
		signInAtProvider(p, olga)
		p.Do("arrive at the clusters", chromedp.WaitVisible(chromedp.CSS("table.clusters")))
		if who := p.Text(".who"); who != "oidc:"+olga.Email {
			t.Fatalf("signed in at the provider as %q, want oidc:%s", who, olga.Email)
		}
		p.Open(clusterPath + "/operations")
		if n, err := chromedp.Run(p.Ctx, chromedp.Evaluate[int](`document.querySelectorAll("form.operation").length`)); err != nil || n != 1 {
			t.Errorf("olga, an operator through her provider's group, is offered %d forms to create an operation (%v)", n, err)
		}
		p.Do("sign out", chromedp.Click(chromedp.CSS(`form.signout button`)), chromedp.WaitVisible(chromedp.CSS(`form.login`)))

		una := itest.OIDCPerson(t, "una") // her provider never verified her email
		p = itest.NewVisitor(t, chrome, ui, una.Email)
		signInAtProvider(p, una)
		p.Do("see the refusal", chromedp.WaitVisible(chromedp.CSS(`[role="alert"]`)))
		if got := p.Text(`[role="alert"]`); !strings.Contains(got, "kube-apiserver did not accept the sign-in: its authentication configuration refuses this account") {
			t.Errorf("una's sign-in: %q", got)
		}
		p.Screenshot("oidc-refused")
	})

	t.Run("the audit log names each person for each action, never ichor-ui", func(t *testing.T) {
		type action struct{ resource, subresource, verb, who string }
		want := []action{
			{"talosmachines", "approval", "patch", "ichor:" + ada},
			{"talosoperations", "", "create", "ichor:" + otto},
			{"talosoperations", "start", "create", "ichor:" + otto},
			{"talosmachines", "support-bundle", "get", "ichor:" + ada},
			{"ichorusers", "", "create", "ichor:" + ada},
			{"ichorusers", "password", "update", "ichor:" + ada},
			{"ichorusers", "", "patch", "ichor:" + ada},
		}
		found := map[action]bool{}
		for _, e := range itest.AuditEvents(t) {
			if e.User.Username == itest.UIUser {
				t.Errorf("ichor-apiserver's audit names ichor-ui: %s", e.Raw)
			}
			found[action{e.ObjectRef.Resource, e.ObjectRef.Subresource, e.Verb, e.User.Username}] = true
		}
		for _, a := range want {
			if !found[a] {
				t.Errorf("no audit event of %s on %s/%s by %s", a.verb, a.resource, a.subresource, a.who)
			}
		}
	})
}
