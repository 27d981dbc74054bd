package integration

import (
	"archive/zip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
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
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/oidcprovider"
	"ichor.dev/ichor/test/talossim"
)

// chromium is a headless Debian Chromium (hack/install-chromium.sh) that
// trusts exactly the serving keys of the console and of the OpenID
// provider, in a profile of its own.
func chromium(t *testing.T, c *console) context.Context {
	t.Helper()
	path, err := proc.Chromium()
	if err != nil {
		t.Fatal(err)
	}
	provider, err := tls.LoadX509KeyPair(cp.OIDC.CertFile, cp.OIDC.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	providerCert, err := x509.ParseCertificate(provider.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
		// As root, Chromium's sandbox cannot start.
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		// This machine has no network beyond loopback: nothing to update or report.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		// The console's and the provider's certificates come from CAs of
		// this test: the browser pins their public keys, which it honours
		// only with a profile directory of its own. No other certificate
		// error is let through.
		chromedp.Flag("ignore-certificate-errors-spki-list", c.spki+","+spkiHash(providerCert)),
	)
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// visitor is one person's tab, in a browser context of its own (cookies
// included), with what they see saved as screenshots.
type visitor struct {
	t    *testing.T
	ctx  context.Context
	base string
	name string
}

func newVisitor(t *testing.T, browserCtx context.Context, c *console, name string) *visitor {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	// The first run opens the tab, which lives as long as the context of
	// that run: this one, not a later run's with a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab for %s: %v", name, err)
	}
	return &visitor{t: t, ctx: ctx, base: c.base, name: name}
}

// do runs browser actions, each run bounded by a minute, failing the test
// with where the browser is, what it shows, and a screenshot of it.
func (p *visitor) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.screenshot("failed-" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, what))
		location := p.run(chromedp.Location())
		p.t.Fatalf("%s, as %s: %v\nat %s, the page says:\n%s", what, p.name, err, location, p.text("body"))
	}
}

// run is the value of a browser action that reads, or why there is none.
func (p *visitor) run(a chromedp.Action[string]) string {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, a)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return s
}

// text is the visible text of the first element sel selects.
func (p *visitor) text(sel string) string { return p.run(chromedp.Text(chromedp.CSS(sel))) }

// open navigates to a console path and waits for its main content.
func (p *visitor) open(path string) {
	p.t.Helper()
	p.do("open "+path, chromedp.Navigate(p.base+path), chromedp.WaitReady(chromedp.CSS("main")))
}

// screenshot saves the whole page under .local/screenshots/ for people to
// look at, and checks that the page carries no token and no key.
func (p *visitor) screenshot(name string) {
	if page := p.run(chromedp.Evaluate[string](`document.documentElement.outerHTML`)); jwtLike.MatchString(page) || strings.Contains(page, "PRIVATE KEY") {
		p.t.Errorf("the page %s carries a token or a key:\n%s", name, page)
	}
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	img, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	root, err := proc.RepoRoot()
	if err != nil {
		p.t.Fatal(err)
	}
	dir := filepath.Join(root, ".local", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), img, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// signIn signs in through the form, as a person types it.
func (p *visitor) signIn(user, password string) {
	p.t.Helper()
	p.open("/login")
	p.do("sign in",
		chromedp.SendKeys(chromedp.CSS(`input[name="username"]`), user),
		chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), password),
		chromedp.Click(chromedp.CSS(`form.login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("table.clusters")),
	)
	if who := p.text(".who"); who != "ichor:"+user {
		p.t.Fatalf("signed in as %q, want ichor:%s", who, user)
	}
}

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
	installControllerRBAC(ctx, t)
	useProvisioningNetworks(ctx, t, "127.0.13.0/24")
	ns := cp.Namespace(t)
	bindControllerSecrets(ctx, t, ns)
	controller := runController(t, func(o *ctrlcmd.Options) {
		o.MachineRecheckInterval = time.Second
		o.MachineHealthInterval = 2 * time.Second
		o.MachineContactTimeout = 5 * time.Second
		o.OperationPollInterval = 250 * time.Millisecond
		o.OperationStepTimeout = operationStepTimeout
	})
	waitHTTP(ctx, t, "http://"+controller.probes+"/readyz")

	useUsersEnabled(ctx, t, true)
	// Plain names (IchorUsers are cluster-wide; no other test makes these),
	// so that the screenshots read as a person would see them.
	ada, otto, vera := "ada", "otto", "vera"
	passwords := map[string]string{ada: "ada's long passphrase", otto: "otto's long passphrase", vera: "vera's long passphrase"}
	createUser(ctx, t, ada, v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleAdmin}, passwords[ada])
	createUser(ctx, t, otto, v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleOperator}, passwords[otto])
	createUser(ctx, t, vera, v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleViewer}, passwords[vera])
	runAuth(t, func(o *authcmd.Options) { o.TokenLifetime = 10 * time.Minute })
	waitIssuerTrusted(t, vera, passwords[vera])
	ui := runUI(t, func(o *uicmd.Options) {
		o.OIDCIssuerURL, o.OIDCClientID, o.OIDCCAFile, o.OIDCName = cp.OIDC.URL, oidcprovider.ConsoleClientID, cp.OIDC.CAFile, "the company's provider"
	})

	// The cluster web: a control plane an admin approved with kubectl, and
	// a worker waiting for a person's decision.
	binDir, err := harness.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kube := &talossim.Kubernetes{BinDir: binDir, Dir: t.TempDir(), Logf: t.Logf}
	t.Cleanup(kube.Stop)
	keepLogsOnFailure(t, kube.Dir)
	const endpointIP = "127.0.13.100"
	ports, err := proc.FreePorts(endpointIP, 1)
	if err != nil {
		t.Fatal(err)
	}
	etcd, trustd := &talossim.EtcdCluster{Name: "web"}, talossim.NewTrustd()
	node := func(addr string) *talossim.Node {
		return simNode(t, talossim.Options{ListenAddress: addr, Kubernetes: kube, Etcd: etcd, Trustd: trustd,
			InstallDelay: 100 * time.Millisecond, RebootDelay: 200 * time.Millisecond})
	}
	cp1, worker1 := node("127.0.13.1:0"), node("127.0.13.2:0")
	mustApply(ctx, t, fmt.Sprintf(`apiVersion: ichor.dev/v1alpha1
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
	waitMachine(ctx, t, ns, "cp-1", "pinned", pinnedTo(cp1.MaintenanceFingerprint()))
	mustKubectl(ctx, t, append(admin, "-n", ns, "patch", "talosmachine", "cp-1", "--subresource=approval", "--type=merge",
		"-p", `{"status":{"approval":{"decision":"Approved"}}}`)...)
	waitMachine(ctx, t, ns, "worker-1", "pinned", pinnedTo(worker1.MaintenanceFingerprint()))

	chrome := chromium(t, ui)
	clusterPath := "/clusters/" + ns + "/web"
	bundlePath := clusterPath + "/machines/cp-1/downloads/support-bundle"

	t.Run("a viewer sees the pending machine, is offered nothing, and is refused a download with the server's reason", func(t *testing.T) {
		p := newVisitor(t, chrome, ui, vera)
		p.signIn(vera, passwords[vera])
		p.screenshot("clusters")
		p.open(clusterPath)
		if got := p.text("#machine-worker-1"); !strings.Contains(got, "pending") || !strings.Contains(got, worker1.MaintenanceFingerprint()) {
			t.Errorf("worker-1's row for a viewer: %q", got)
		}
		if n, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`document.querySelectorAll("form.decide, a.download").length`)); err != nil || n != 0 {
			t.Errorf("a viewer is offered %d approvals or downloads (%v)", n, err)
		}
		p.open(bundlePath)
		if got := p.text(`[role="alert"]`); !strings.Contains(got, "forbidden") || !strings.Contains(got, "ichor:"+vera) || !strings.Contains(got, "support-bundle") {
			t.Errorf("a viewer's download: %q", got)
		}
		p.screenshot("viewer-refused")
	})

	t.Run("an admin compares the pinned fingerprint and approves the machine", func(t *testing.T) {
		p := newVisitor(t, chrome, ui, ada)
		p.signIn(ada, passwords[ada])
		p.open(clusterPath)
		if got := p.text("#machine-worker-1 .fingerprint"); got != worker1.MaintenanceFingerprint() {
			t.Fatalf("the fingerprint beside worker-1: %q, the machine's console shows %q", got, worker1.MaintenanceFingerprint())
		}
		p.screenshot("cluster-pending")
		p.do("approve worker-1",
			chromedp.SendKeys(chromedp.CSS(`#machine-worker-1 input[name="reason"]`), "fingerprint matches the console"),
			chromedp.Click(chromedp.CSS(`#machine-worker-1 button[value="Approved"]`)),
			// The page after the approval offers it no more.
			chromedp.WaitNotPresent(chromedp.CSS(`#machine-worker-1 form.decide`)),
		)
		if got := p.text("#machine-worker-1"); !strings.Contains(got, "Approved by ichor:"+ada+": fingerprint matches the console") {
			t.Errorf("worker-1 after the approval: %q", got)
		}
		m, err := apiClient(t).IchorV1alpha1().TalosMachines(ns).Get(ctx, "worker-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := m.Status.Approval; a == nil || a.Decision != v1alpha1.ApprovalApproved || a.By != "ichor:"+ada {
			t.Fatalf("worker-1's approval: %+v", a)
		}
		waitCluster(ctx, t, ns, "web", v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
		for _, name := range []string{"cp-1", "worker-1"} {
			waitMachine(ctx, t, ns, name, "Ready", func(m *v1alpha1.TalosMachine) bool { return m.Status.Phase == v1alpha1.MachinePhaseReady })
		}
		p.open(clusterPath)
		p.screenshot("cluster")
	})

	t.Run("an operator reboots a worker after a confirmation, and watches it without a reload", func(t *testing.T) {
		p := newVisitor(t, chrome, ui, otto)
		p.signIn(otto, passwords[otto])
		p.open(clusterPath + "/operations")
		p.do("create a reboot of worker-1",
			chromedp.SetValue(chromedp.CSS(`select[name="type"]`), string(v1alpha1.OperationReboot)),
			chromedp.SendKeys(chromedp.CSS(`input[name="name"]`), "reboot-worker-1"),
			chromedp.Click(chromedp.CSS(`input[name="machines"][value="worker-1"]`)),
			chromedp.Click(chromedp.CSS(`form.operation button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS("#progress")),
		)
		if got := p.text("#progress .phase"); got != "Pending" {
			t.Errorf("a new operation's phase: %q", got)
		}
		// Followed as a person clicks it; a click through DevTools could
		// race the live stream's next rendering of the progress.
		p.do("open the confirmation",
			chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
				_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.querySelector("#progress a.start").click(), true)`))
				return err
			}),
			chromedp.WaitVisible(chromedp.CSS("form.start")))
		if got := p.text(".confirm"); got != "Starting it reboots worker-1 of cluster web, one machine at a time." {
			t.Errorf("the confirmation says %q", got)
		}
		p.screenshot("operation-confirm")
		p.do("start", chromedp.Click(chromedp.CSS(`form.start button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#progress")))
		// A reload would lose this mark: the progress below must arrive
		// through the page's live stream.
		p.do("mark the page", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.ichorStillThisPage = true`))
			return err
		}))
		before := p.text("#progress .summary .phase")
		if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](
			`["Succeeded", "Failed"].includes(document.querySelector("#progress .summary .phase")?.textContent)`,
			chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(3*time.Minute))); err != nil {
			t.Fatalf("the reboot never ended on the page: %v\n%s", err, p.text("#progress"))
		}
		if got := p.text("#progress .summary .phase"); got != string(v1alpha1.OperationSucceeded) {
			t.Errorf("the operation's phase on the page: %q (it was %q when started)\n%s", got, before, p.text("#progress"))
		}
		if got := p.text("#progress .steps tbody"); !strings.Contains(got, "worker-1") || !strings.Contains(got, "Succeeded") {
			t.Errorf("the steps on the page: %q", got)
		}
		if still, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`window.ichorStillThisPage === true`)); err != nil || !still {
			t.Errorf("the page was reloaded to show the progress (%v)", err)
		}
		if n, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`document.querySelectorAll("#progress a.start").length`)); err != nil || n != 0 {
			t.Errorf("a started operation still offers %d starts (%v)", n, err)
		}
		if !strings.Contains(p.text("#progress"), "started by ichor:"+otto) {
			t.Errorf("the progress does not name who started it: %q", p.text("#progress"))
		}
		p.screenshot("operation")
		op, err := apiClient(t).IchorV1alpha1().TalosOperations(ns).Get(ctx, "reboot-worker-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if op.Status.Phase != v1alpha1.OperationSucceeded || op.Status.StartedBy != "ichor:"+otto {
			t.Errorf("the operation: %s started by %q", op.Status.Phase, op.Status.StartedBy)
		}
		p.open(clusterPath + "/operations")
		p.screenshot("operations")
	})

	t.Run("an admin downloads a support bundle, streamed as herself", func(t *testing.T) {
		p := newVisitor(t, chrome, ui, ada)
		p.signIn(ada, passwords[ada])
		p.open(clusterPath)
		dir := t.TempDir()
		progress := chromedp.Events(p.ctx, cdpbrowser.DownloadProgress)
		p.do("download cp-1's support bundle",
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
		waitEventSaying(ctx, t, ns, "cp-1", corev1.EventTypeNormal, "Downloaded", "ichor:"+ada+" downloaded the support-bundle of TalosMachine cp-1")
		p.open(clusterPath)
		if got := p.text("table.events"); !strings.Contains(got, "ichor:"+ada+" downloaded the support-bundle of TalosMachine cp-1") ||
			!strings.Contains(got, "reboot-worker-1") {
			t.Errorf("the cluster's Events on its page: %q", got)
		}
		p.screenshot("cluster")
	})

	t.Run("an operator reads the config patches without their bodies", func(t *testing.T) {
		p := newVisitor(t, chrome, ui, otto)
		p.signIn(otto, passwords[otto])
		p.open(clusterPath + "/patches")
		if got := p.text("#patch-sysctls"); !strings.Contains(got, "cluster") || !strings.Contains(got, "every machine") ||
			!strings.Contains(got, "cp-1, worker-1") {
			t.Errorf("the sysctls patch's row: %q", got)
		}
		if body := p.text("body"); strings.Contains(body, "somaxconn") {
			t.Errorf("the patches page shows a patch's body:\n%s", body)
		}
		p.screenshot("patches")
		// An operator manages no users: no link, and the server says why.
		if n, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`document.querySelectorAll('header a[href="/users"]').length`)); err != nil || n != 0 {
			t.Errorf("an operator is offered the users page (%d, %v)", n, err)
		}
		p.open("/users")
		if got := p.text(`[role="alert"]`); !strings.Contains(got, "forbidden") || !strings.Contains(got, "ichor:"+otto) {
			t.Errorf("an operator's users page: %q", got)
		}
	})

	t.Run("an admin creates a user, and disables her; a refused password makes no user", func(t *testing.T) {
		p := newVisitor(t, chrome, ui, ada)
		p.signIn(ada, passwords[ada])
		p.do("open the users page", chromedp.Click(chromedp.CSS(`header a[href="/users"]`)), chromedp.WaitVisible(chromedp.CSS("table.users")))
		users := apiClient(t).IchorV1alpha1().IchorUsers()
		t.Cleanup(func() { _ = users.Delete(context.Background(), "nina", metav1.DeleteOptions{}) })
		create := func(name, password string) {
			p.do("create "+name,
				chromedp.SendKeys(chromedp.CSS(`form.operation input[name="name"]`), name),
				chromedp.SetValue(chromedp.CSS(`form.operation select[name="role"]`), string(v1alpha1.UserRoleViewer)),
				chromedp.SendKeys(chromedp.CSS(`form.operation input[name="password"]`), password),
				chromedp.Click(chromedp.CSS(`form.operation button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.CSS("h1")),
			)
		}
		create("nora", "short")
		if got := p.text(`[role="alert"]`); !strings.Contains(got, "nora was not created") {
			t.Errorf("a refused password: %q", got)
		}
		if _, err := users.Get(ctx, "nora", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the user of a refused password: %v, want none", err)
		}
		create("nina", "nina's long passphrase")
		p.do("see nina", chromedp.WaitVisible(chromedp.CSS("#user-nina")))
		if got := p.text("#user-nina"); !strings.Contains(got, "viewer") || !strings.Contains(got, "set") || !strings.Contains(got, "enabled") {
			t.Errorf("nina's row: %q", got)
		}
		p.do("disable nina", chromedp.Click(chromedp.CSS(`#user-nina button[value="true"]`)), chromedp.WaitVisible(chromedp.CSS(`#user-nina button[value="false"]`)))
		if u, err := users.Get(ctx, "nina", metav1.GetOptions{}); err != nil || !u.Spec.Disabled || !u.Status.PasswordSet {
			t.Errorf("nina after the admin's changes: %v %+v %+v", err, u.Spec, u.Status)
		}
		p.screenshot("users")
		if body := p.text("body"); strings.Contains(body, "passphrase") {
			t.Errorf("the users page shows a password:\n%s", body)
		}
	})

	t.Run("people of the OpenID provider sign in there; one Kubernetes refuses is told why", func(t *testing.T) {
		signInAtProvider := func(p *visitor, who oidcprovider.Person) {
			p.open("/login")
			p.do("sign in at the provider",
				chromedp.Click(chromedp.CSS(`a.oidc`)),
				chromedp.WaitVisible(chromedp.CSS(`input[name="username"]`)),
				chromedp.SendKeys(chromedp.CSS(`input[name="username"]`), who.Username),
				chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), who.Password),
				chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
			)
		}
		olga := oidcPerson(t, "olga")
		p := newVisitor(t, chrome, ui, olga.Email)
		signInAtProvider(p, olga)
		p.do("arrive at the clusters", chromedp.WaitVisible(chromedp.CSS("table.clusters")))
		if who := p.text(".who"); who != "oidc:"+olga.Email {
			t.Fatalf("signed in at the provider as %q, want oidc:%s", who, olga.Email)
		}
		p.open(clusterPath + "/operations")
		if n, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`document.querySelectorAll("form.operation").length`)); err != nil || n != 1 {
			t.Errorf("olga, an operator through her provider's group, is offered %d forms to create an operation (%v)", n, err)
		}
		p.do("sign out", chromedp.Click(chromedp.CSS(`form.signout button`)), chromedp.WaitVisible(chromedp.CSS(`form.login`)))

		una := oidcPerson(t, "una") // her provider never verified her email
		p = newVisitor(t, chrome, ui, una.Email)
		signInAtProvider(p, una)
		p.do("see the refusal", chromedp.WaitVisible(chromedp.CSS(`[role="alert"]`)))
		if got := p.text(`[role="alert"]`); !strings.Contains(got, "kube-apiserver did not accept the sign-in: its authentication configuration refuses this account") {
			t.Errorf("una's sign-in: %q", got)
		}
		p.screenshot("oidc-refused")
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
		for _, e := range auditEvents(t) {
			if e.User.Username == uiUser {
				t.Errorf("ichor-apiserver's audit names ichor-ui: %s", e.raw)
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
