package api

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/integration/itest"
)

func TestKubectlAPIResources(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	out := itest.MustKubectl(ctx, t, "api-resources", "--api-group=ichor.dev", "-o", "wide")
	tbl := itest.ParseTable(t, out)
	for _, col := range []string{"NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND", "VERBS", "CATEGORIES"} {
		if !slices.Contains(tbl.Header, col) {
			t.Fatalf("api-resources -o wide has no %s column:\n%s", col, out)
		}
	}
	want := map[string]struct {
		short, kind string
		namespaced  bool
	}{
		"talosclusters":           {"tc", "TalosCluster", true},
		"talosmachines":           {"tm", "TalosMachine", true},
		"talosconfigpatches":      {"tcp", "TalosConfigPatch", true},
		"talosoperations":         {"top", "TalosOperation", true},
		"taloscredentialrequests": {"tcr", "TalosCredentialRequest", true},
		"machinereclaims":         {"mr", "MachineReclaim", true},
		"talosbackups":            {"tb", "TalosBackup", true},
		"ichorusers":              {"iu", "IchorUser", false},
		"ichorinstallations":      {"ii", "IchorInstallation", false},
	}
	if len(tbl.Rows) != len(want) {
		t.Errorf("api-resources lists %d ichor.dev resources, want %d:\n%s", len(tbl.Rows), len(want), out)
	}
	wantVerbs := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	for name, w := range want {
		r := tbl.Row(t, name)
		if r["SHORTNAMES"] != w.short {
			t.Errorf("%s: SHORTNAMES %q, want %q", name, r["SHORTNAMES"], w.short)
		}
		if r["KIND"] != w.kind {
			t.Errorf("%s: KIND %q, want %q", name, r["KIND"], w.kind)
		}
		if r["APIVERSION"] != "ichor.dev/v1alpha1" {
			t.Errorf("%s: APIVERSION %q", name, r["APIVERSION"])
		}
		wantNS := "false"
		if w.namespaced {
			wantNS = "true"
		}
		if r["NAMESPACED"] != wantNS {
			t.Errorf("%s: NAMESPACED %q, want %s", name, r["NAMESPACED"], wantNS)
		}
		verbs := strings.Split(r["VERBS"], ",")
		for _, v := range wantVerbs {
			if !slices.Contains(verbs, v) {
				t.Errorf("%s: VERBS %q lack %s", name, r["VERBS"], v)
			}
		}
		if !slices.Contains(strings.Split(r["CATEGORIES"], ","), "ichor") {
			t.Errorf("%s: CATEGORIES %q lack ichor", name, r["CATEGORIES"])
		}
	}

	// The short names resolve, and -o name lists the same set.
	names := strings.Fields(itest.MustKubectl(ctx, t, "api-resources", "--api-group=ichor.dev", "-o", "name"))
	if len(names) != len(want) {
		t.Errorf("api-resources -o name: %v", names)
	}
	for name := range want {
		if !slices.Contains(names, name+".ichor.dev") {
			t.Errorf("api-resources -o name lacks %s.ichor.dev: %v", name, names)
		}
	}
}

func TestKubectlCategoryAndShortNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	ns := itest.CP.Namespace(t)
	itest.SetupCluster(ctx, t, ns)

	out := itest.MustKubectl(ctx, t, "get", "ichor", "-n", ns, "-o", "name")
	got := strings.Fields(out)
	for _, want := range []string{
		"taloscluster.ichor.dev/prod",
		"talosmachine.ichor.dev/cp-1",
		"talosmachine.ichor.dev/spare",
		"talosconfigpatch.ichor.dev/wipe",
		"talosoperation.ichor.dev/reboot-1",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("kubectl get ichor -n %s lacks %s:\n%s", ns, want, out)
		}
	}
	// The human-readable form prints one table per kind, each with its columns.
	out = itest.MustKubectl(ctx, t, "get", "ichor", "-n", ns)
	for _, want := range []string{"taloscluster.ichor.dev/prod", "talosmachine.ichor.dev/cp-1", "talosconfigpatch.ichor.dev/wipe", "ENDPOINT", "CLUSTER"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get ichor -n %s lacks %q:\n%s", ns, want, out)
		}
	}

	for short, want := range map[string]string{
		"tc": "taloscluster.ichor.dev/prod", "tm": "talosmachine.ichor.dev/cp-1",
		"tcp": "talosconfigpatch.ichor.dev/wipe", "top": "talosoperation.ichor.dev/reboot-1",
	} {
		if out := itest.MustKubectl(ctx, t, "get", short, "-n", ns, "-o", "name"); !slices.Contains(strings.Fields(out), want) {
			t.Errorf("kubectl get %s -n %s -o name: %q lacks %s", short, ns, out, want)
		}
	}
	for _, short := range []string{"tcr", "mr"} {
		if out := itest.MustKubectl(ctx, t, "get", short, "-n", ns, "-o", "name"); strings.TrimSpace(out) != "" {
			t.Errorf("kubectl get %s -n %s -o name: %q, want nothing", short, ns, out)
		}
	}
	for _, short := range []string{"iu", "ii"} {
		itest.MustKubectl(ctx, t, "get", short)
	}
}

func TestKubectlExplain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	itest.WaitOpenAPIv3(ctx, t) // what kubectl explain reads

	out := itest.MustKubectl(ctx, t, "explain", "talosmachine.spec")
	for _, want := range []string{
		"KIND:       TalosMachine",
		"GROUP:      ichor.dev",
		"VERSION:    v1alpha1",
		"TalosMachineSpec is what a user asks of a machine.",
		"clusterName\t<string>",
		"address\t<string> -required-",
		"address is the host:port of the node's Talos API",
		"role\t<string>",
		"enum: controlplane, worker",
		"install\t<InstallSpec>",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain talosmachine.spec lacks %q:\n%s", want, out)
		}
	}

	out = itest.MustKubectl(ctx, t, "explain", "taloscluster.spec.controlPlane.endpoint")
	for _, want := range []string{"KIND:       TalosCluster", "FIELD: endpoint <string>", "endpoint is the https URL of the cluster's Kubernetes API"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain taloscluster.spec.controlPlane.endpoint lacks %q:\n%s", want, out)
		}
	}

	// Short names and cluster-scoped kinds explain too; a field that does not exist is an error.
	if out := itest.MustKubectl(ctx, t, "explain", "tm.status.maintenance"); !strings.Contains(out, "certificateFingerprint") {
		t.Errorf("kubectl explain tm.status.maintenance:\n%s", out)
	}
	if out := itest.MustKubectl(ctx, t, "explain", "ichorinstallation"); !strings.Contains(out, "KIND:       IchorInstallation") {
		t.Errorf("kubectl explain ichorinstallation:\n%s", out)
	}
	if _, err := itest.CP.Kubectl(ctx, "explain", "talosmachine.spec.noSuchField"); err == nil {
		t.Error("kubectl explain of a field that does not exist succeeded")
	}
}

func TestKubectlGetTalosMachinesColumns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	ns := itest.CP.Namespace(t)
	itest.SetupCluster(ctx, t, ns)

	out := itest.MustKubectl(ctx, t, "get", "talosmachines", "-n", ns)
	tbl := itest.ParseTable(t, out)
	if want := []string{"NAME", "CLUSTER", "ROLE", "PHASE", "ADDRESS", "TALOS", "AGE"}; !slices.Equal(tbl.Header, want) {
		t.Fatalf("kubectl get talosmachines header %v, want %v:\n%s", tbl.Header, want, out)
	}
	if len(tbl.Rows) != 2 {
		t.Fatalf("kubectl get talosmachines: %d rows, want 2:\n%s", len(tbl.Rows), out)
	}
	check := func(r map[string]string, want map[string]string) {
		t.Helper()
		for col, v := range want {
			if r[col] != v {
				t.Errorf("row %s: %s = %q, want %q\n%s", r["NAME"], col, r[col], v, out)
			}
		}
		if r["AGE"] == "" {
			t.Errorf("row %s: no AGE\n%s", r["NAME"], out)
		}
	}
	check(tbl.Row(t, "cp-1"), map[string]string{
		"CLUSTER": "prod", "ROLE": "controlplane", "PHASE": "Ready", "ADDRESS": "10.5.0.2:50000", "TALOS": "v1.13.0",
	})
	// The spare is unassigned and has no status: its cells are empty.
	check(tbl.Row(t, "spare"), map[string]string{
		"CLUSTER": "", "ROLE": "", "PHASE": "", "ADDRESS": "10.5.0.9:50001", "TALOS": "",
	})

	out = itest.MustKubectl(ctx, t, "get", "talosmachines", "-n", ns, "-o", "wide")
	tbl = itest.ParseTable(t, out)
	if want := []string{"NAME", "CLUSTER", "ROLE", "PHASE", "ADDRESS", "TALOS", "NODE", "FINGERPRINT", "AGE"}; !slices.Equal(tbl.Header, want) {
		t.Fatalf("kubectl get talosmachines -o wide header %v, want %v:\n%s", tbl.Header, want, out)
	}
	check(tbl.Row(t, "cp-1"), map[string]string{
		"CLUSTER": "prod", "ROLE": "controlplane", "PHASE": "Ready", "ADDRESS": "10.5.0.2:50000", "TALOS": "v1.13.0",
		"NODE": "node-a", "FINGERPRINT": itest.Fingerprint[:16],
	})
	check(tbl.Row(t, "spare"), map[string]string{"NODE": "", "FINGERPRINT": "", "ADDRESS": "10.5.0.9:50001"})

	// A single object by short name prints the same row; --no-headers drops the header.
	out = itest.MustKubectl(ctx, t, "get", "tm", "cp-1", "-n", ns, "--no-headers")
	if f := strings.Fields(out); len(f) != 7 || f[0] != "cp-1" || f[1] != "prod" || f[3] != "Ready" {
		t.Errorf("kubectl get tm cp-1 --no-headers: %q", out)
	}
}

func TestKubectlServerSideApply(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	ns := itest.CP.Namespace(t)

	machine := func(spec string) string {
		return "apiVersion: ichor.dev/v1alpha1\nkind: TalosMachine\nmetadata:\n  name: ssa-1\n  namespace: " + ns + "\nspec:\n" + spec
	}
	get := func(args ...string) *v1alpha1.TalosMachine {
		t.Helper()
		out := itest.MustKubectl(ctx, t, append([]string{"get", "talosmachine", "ssa-1", "-n", ns, "-o", "yaml"}, args...)...)
		var m v1alpha1.TalosMachine
		if err := yaml.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("decode kubectl get -o yaml: %v\n%s", err, out)
		}
		return &m
	}

	out := itest.MustApply(ctx, t, machine("  clusterName: prod\n  address: 10.5.0.7\n  hostname: node-7\n"))
	if want := "talosmachine.ichor.dev/ssa-1 serverside-applied"; !strings.Contains(out, want) {
		t.Errorf("first apply printed %q, want %q", out, want)
	}
	m := get()
	if m.Spec.Hostname != "node-7" || m.Spec.Address != "10.5.0.7:50000" || m.Spec.Role != v1alpha1.MachineRoleWorker || m.Generation != 1 {
		t.Fatalf("after first apply: generation %d, spec %+v", m.Generation, m.Spec)
	}

	// The second apply changes a field and adds one: an update, not a new object.
	uid := m.UID
	itest.MustApply(ctx, t, machine("  clusterName: prod\n  address: 10.5.0.7\n  hostname: node-7b\n  install: {disk: /dev/sdb}\n"))
	m = get("--show-managed-fields")
	if m.UID != uid {
		t.Errorf("second apply replaced the object: uid %s, was %s", m.UID, uid)
	}
	if m.Spec.Hostname != "node-7b" || m.Spec.Install.Disk != "/dev/sdb" || m.Generation != 2 {
		t.Errorf("after second apply: generation %d, spec %+v", m.Generation, m.Spec)
	}
	var applied *metav1.ManagedFieldsEntry
	for i, mf := range m.ManagedFields {
		if mf.Manager == "kubectl" && mf.Operation == metav1.ManagedFieldsOperationApply {
			applied = &m.ManagedFields[i]
		}
	}
	if applied == nil {
		t.Fatalf("no managedFields entry for manager kubectl, operation Apply: %+v", m.ManagedFields)
	}
	if applied.APIVersion != "ichor.dev/v1alpha1" || applied.FieldsV1 == nil {
		t.Errorf("kubectl's managedFields entry: %+v", applied)
	} else {
		for _, f := range []string{`"f:hostname"`, `"f:address"`, `"f:clusterName"`, `"f:disk"`} {
			if !strings.Contains(string(applied.FieldsV1.Raw), f) {
				t.Errorf("kubectl's managed fields %s lack %s", applied.FieldsV1.Raw, f)
			}
		}
	}
	if m := get(); len(m.ManagedFields) != 0 {
		t.Errorf("kubectl get -o yaml without --show-managed-fields printed managedFields: %+v", m.ManagedFields)
	}

	// A field the applier stops sending is removed.
	itest.MustApply(ctx, t, machine("  clusterName: prod\n  address: 10.5.0.7\n  install: {disk: /dev/sdb}\n"))
	if m := get(); m.Spec.Hostname != "" || m.Spec.Install.Disk != "/dev/sdb" {
		t.Errorf("after dropping hostname from the applied config: spec %+v", m.Spec)
	}

	// Another manager changing a field kubectl owns conflicts.
	_, err := itest.CP.KubectlWithInput(ctx, []byte(machine("  clusterName: prod\n  address: 10.5.0.8\n")),
		"apply", "--server-side", "--field-manager=someone-else", "-f", "-")
	var kerr *harness.KubectlError
	if !errors.As(err, &kerr) || !strings.Contains(kerr.Stderr, "conflict") || !strings.Contains(kerr.Stderr, ".spec.address") {
		t.Errorf("conflicting apply by another manager: %v", err)
	}
}

func TestKubectlWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	ns := itest.CP.Namespace(t)
	itest.SetupCluster(ctx, t, ns)

	// --output-watch-events with -o name prints only the name, not the event
	// type; the default table keeps the EVENT column, so the test can tell the
	// initial ADDED from the MODIFIED its change causes.
	lines, stop := itest.WatchLines(ctx, t, "get", "talosmachines", "-n", ns, "-w", "--output-watch-events")
	itest.AwaitLine(t, lines, stop, "initial ADDED cp-1", func(f []string) bool {
		return len(f) >= 2 && f[0] == "ADDED" && f[1] == "cp-1"
	})

	itest.MustKubectl(ctx, t, "patch", "talosmachine", "cp-1", "-n", ns, "--subresource=status", "--type=merge",
		"-p", `{"status":{"phase":"Unreachable"}}`)
	line := itest.AwaitLine(t, lines, stop, "MODIFIED cp-1 Unreachable", func(f []string) bool {
		return len(f) >= 2 && f[0] == "MODIFIED" && f[1] == "cp-1" && slices.Contains(f, "Unreachable")
	})
	t.Logf("watch saw: %s", line)

	// A machine created after the watch started arrives as ADDED, and its deletion as DELETED.
	itest.MustApply(ctx, t, "apiVersion: ichor.dev/v1alpha1\nkind: TalosMachine\nmetadata: {name: late, namespace: "+ns+"}\nspec: {address: 10.5.0.11}\n")
	itest.AwaitLine(t, lines, stop, "ADDED late", func(f []string) bool { return len(f) >= 2 && f[0] == "ADDED" && f[1] == "late" })
	itest.MustKubectl(ctx, t, "delete", "talosmachine", "late", "-n", ns, "--wait=false")
	itest.AwaitLine(t, lines, stop, "DELETED late", func(f []string) bool { return len(f) >= 2 && f[0] == "DELETED" && f[1] == "late" })

	if stderr := stop(); strings.Contains(stderr, "error") {
		t.Errorf("kubectl watch stderr:\n%s", stderr)
	}
}

func TestKubectlAuthCanI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	ns := itest.CP.Namespace(t)

	as := map[string][]string{
		"viewer":   {"--as=alice", "--as-group=ichor:viewer"},
		"operator": {"--as=bob", "--as-group=ichor:operator"},
		"admin":    {"--as=carol", "--as-group=ichor:admin"},
		"nobody":   {"--as=mallory"},
	}
	for _, tc := range []struct {
		who  string
		args []string
		want bool
	}{
		{"viewer", []string{"list", "talosmachines"}, true},
		{"viewer", []string{"watch", "tm"}, true},
		{"viewer", []string{"get", "talosclusters", "--subresource=status"}, true},
		{"viewer", []string{"create", "talosmachines"}, false},
		{"viewer", []string{"list", "ichorusers"}, false},
		{"viewer", []string{"list", "taloscredentialrequests"}, false},
		{"viewer", []string{"approve", "talosmachines", "--subresource=approval"}, false},
		{"viewer", []string{"start", "talosoperations", "--subresource=reboot"}, false},
		{"operator", []string{"create", "talosmachines"}, true},
		{"operator", []string{"approve", "talosmachines", "--subresource=approval"}, true},
		{"operator", []string{"start", "talosoperations", "--subresource=reboot"}, true},
		{"operator", []string{"start", "talosoperations", "--subresource=ca-rotation"}, false},
		{"operator", []string{"create", "talosclusters"}, true},
		{"operator", []string{"delete", "talosclusters"}, false},
		{"admin", []string{"delete", "talosclusters"}, true},
		{"operator", []string{"reclaim", "machinereclaims"}, false},
		{"admin", []string{"start", "talosoperations", "--subresource=ca-rotation"}, true},
		{"admin", []string{"start", "talosoperations", "--subresource=reboot"}, true},
		{"admin", []string{"approve", "talosmachines", "--subresource=approval"}, true},
		{"admin", []string{"create", "ichorusers"}, true},
		{"admin", []string{"update", "talosclusters", "--subresource=cilium-values"}, true},
		{"admin", []string{"update", "ichorinstallations", "--subresource=settings"}, true},
		{"operator", []string{"update", "talosclusters", "--subresource=secret-references"}, false},
		{"operator", []string{"update", "talosclusters", "--subresource=backup"}, false},
		{"admin", []string{"update", "talosclusters", "--subresource=backup"}, true},
		{"viewer", []string{"list", "talosbackups"}, true},
		{"viewer", []string{"create", "talosbackups"}, false},
		{"operator", []string{"create", "talosbackups"}, true},
		{"operator", []string{"delete", "talosbackups"}, false},
		{"admin", []string{"delete", "talosbackups"}, true},
		{"operator", []string{"update", "ichorinstallations", "--subresource=version"}, false},
		{"operator", []string{"create", "taloscredentialrequests"}, true},
		{"viewer", []string{"create", "taloscredentialrequests"}, false},
		{"admin", []string{"get", "secrets"}, false},
		{"admin", []string{"impersonate", "users"}, false},
		{"nobody", []string{"list", "talosmachines"}, false},
	} {
		args := append(append(slices.Clone(tc.args), "-n", ns), as[tc.who]...)
		if got := itest.CanI(ctx, t, args...); got != tc.want {
			t.Errorf("%s: kubectl auth can-i %s = %v, want %v", tc.who, strings.Join(tc.args, " "), got, tc.want)
		}
	}
}

func TestKubectlDryRunCreate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), itest.KubectlTimeout)
	defer cancel()
	ns := itest.CP.Namespace(t)

	good := "apiVersion: ichor.dev/v1alpha1\nkind: TalosMachine\nmetadata: {name: dry, namespace: " + ns + "}\nspec:\n  clusterName: prod\n  address: 10.5.0.3\n"
	out, err := itest.CP.KubectlWithInput(ctx, []byte(good), "create", "--dry-run=server", "-f", "-", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The server answered: it defaulted the port and the role.
	var m v1alpha1.TalosMachine
	if err := yaml.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("decode dry-run output: %v\n%s", err, out)
	}
	if m.Spec.Address != "10.5.0.3:50000" || m.Spec.Role != v1alpha1.MachineRoleWorker || m.Name != "dry" {
		t.Errorf("dry-run create returned %+v", m)
	}
	if out, err := itest.CP.KubectlWithInput(ctx, []byte(good), "create", "--dry-run=server", "-f", "-"); err != nil || !strings.Contains(out, "(server dry run)") {
		t.Errorf("dry-run create: %q, %v", out, err)
	}
	// Nothing was stored.
	_, err = itest.CP.Kubectl(ctx, "get", "talosmachine", "dry", "-n", ns)
	var kerr *harness.KubectlError
	if !errors.As(err, &kerr) || !strings.Contains(kerr.Stderr, "NotFound") {
		t.Errorf("kubectl get of a dry-run-created machine: %v", err)
	}
	if out := itest.MustKubectl(ctx, t, "get", "talosmachines", "-n", ns, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("dry run stored something: %q", out)
	}

	// A bad object is refused with the paths of the bad fields.
	bad := "apiVersion: ichor.dev/v1alpha1\nkind: TalosMachine\nmetadata: {name: bad, namespace: " + ns + "}\nspec:\n  clusterName: prod\n  role: boss\n  address: 10.5.0.3\n  install: {disk: sda}\n"
	_, err = itest.CP.KubectlWithInput(ctx, []byte(bad), "create", "--dry-run=server", "-f", "-")
	if !errors.As(err, &kerr) {
		t.Fatalf("dry-run create of an invalid machine: %v", err)
	}
	for _, want := range []string{`TalosMachine "bad" is invalid`, "spec.role", `"boss"`, "spec.install.disk", "/dev/sda"} {
		if !strings.Contains(kerr.Stderr, want) {
			t.Errorf("dry-run create error lacks %q:\n%s", want, kerr.Stderr)
		}
	}
	// An unknown field is refused by the server's strict field validation, with its path.
	unknown := "apiVersion: ichor.dev/v1alpha1\nkind: TalosMachine\nmetadata: {name: unknown, namespace: " + ns + "}\nspec:\n  address: 10.5.0.3\n  adress: 10.5.0.4\n"
	_, err = itest.CP.KubectlWithInput(ctx, []byte(unknown), "create", "--dry-run=server", "-f", "-")
	if !errors.As(err, &kerr) || !strings.Contains(kerr.Stderr, "spec.adress") {
		t.Errorf("dry-run create with an unknown field: %v", err)
	}
	if out := itest.MustKubectl(ctx, t, "get", "talosmachines", "-n", ns, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("refused dry runs stored something: %q", out)
	}
}
