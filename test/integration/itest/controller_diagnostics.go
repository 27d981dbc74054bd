package itest

import (
	"archive/zip"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/talossim"
)

// These checks download what a node or a cluster hands out, other than an
// etcd snapshot, with kubectl get --raw through kube-apiserver and
// ichor-apiserver, against the Ready cluster demo.

// MachinePath is the path of a TalosMachine's subresource in ns.
func MachinePath(ns, machine, subresource string) string {
	return "/apis/ichor.dev/v1alpha1/namespaces/" + ns + "/talosmachines/" + machine + "/" + subresource
}

// WantKubectlError fails t unless err is kubectl's and its output holds every part.
func WantKubectlError(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	var kerr *harness.KubectlError
	if !errors.As(err, &kerr) {
		t.Errorf("%s: %v, want kubectl to fail", what, err)
		return
	}
	for _, p := range parts {
		if !strings.Contains(kerr.Stderr, p) {
			t.Errorf("%s: kubectl says %q, want it to say %q", what, kerr.Stderr, p)
		}
	}
}

// CheckSupportBundleDownload downloads cp-1's support bundle as an admin and
// reads the archive; operators may not.
func CheckSupportBundleDownload(ctx context.Context, t *testing.T, ns string) {
	path := MachinePath(ns, "cp-1", "support-bundle")
	out, err := CP.Kubectl(ctx, "--as=carol", "--as-group=ichor:admin", "get", "--raw", path)
	if err != nil {
		t.Fatalf("kubectl get --raw %s: %v", path, err)
	}
	z, err := zip.NewReader(strings.NewReader(out), int64(len(out)))
	if err != nil {
		t.Fatalf("the support bundle (%d bytes) is not a zip archive: %v", len(out), err)
	}
	files := map[string]string{}
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		files[f.Name] = string(b)
	}
	for name, want := range map[string]string{
		"version":                        "Tag:        v1.13.0",
		"services":                       "etcd",
		"service-logs/kubelet.log":       "kubelet: simulated log line",
		"dmesg.log":                      "Linux version",
		"resources/machinetypes.yaml":    "controlplane",
		"resources/machinestatuses.yaml": "stage: running",
	} {
		if got, ok := files[name]; !ok || !strings.Contains(got, want) {
			t.Errorf("support bundle %s: want it to hold %q (present %t)", name, want, ok)
		}
	}
	// The credential was os:reader's, which reads all of it.
	if e, ok := files["errors.txt"]; ok {
		t.Errorf("the bundle has errors:\n%s", e)
	}
	for name, body := range files {
		if strings.Contains(body, "PRIVATE KEY") {
			t.Errorf("support bundle %s holds a private key", name)
		}
	}
	WaitEventSaying(ctx, t, ns, "cp-1", corev1.EventTypeNormal, "Downloaded", "carol downloaded the support-bundle of TalosMachine cp-1")

	_, err = CP.Kubectl(ctx, "--as=olivia", "--as-group=ichor:operator", "get", "--raw", path)
	WantKubectlError(t, "operator support bundle", err, "Forbidden")

	// get on the subresource lets the request through kube-apiserver; the
	// download verb is ichor-apiserver's to check.
	getBundles := rbacv1.PolicyRule{APIGroups: []string{"ichor.dev"}, Resources: []string{"talosmachines/support-bundle"}, Verbs: []string{"get"}}
	GrantRole(ctx, t, ns, "get-support-bundles", rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "gerry"}, getBundles)
	// kube-apiserver sees the binding once its RBAC cache has it; until
	// then it refuses gerry itself.
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err = CP.Kubectl(ctx, "--as=gerry", "get", "--raw", path)
		var kerr *harness.KubectlError
		return errors.As(err, &kerr) && strings.Contains(kerr.Stderr, "cannot download"), nil
	})
	WantKubectlError(t, "support bundle with get but not download", err,
		"Forbidden", `cannot download talosmachines/support-bundle "cp-1"`, `it needs the "download" verb`)

	// download granted by resourceNames: ichor-apiserver first asks whether
	// gina may download every machine's bundle (no), then about the one
	// named, in its own check and in the credential request's admission.
	GrantRole(ctx, t, ns, "bundle-of-cp-1", rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "gina"},
		getBundles,
		rbacv1.PolicyRule{APIGroups: []string{"ichor.dev"}, Resources: []string{"talosmachines/support-bundle"}, Verbs: []string{"download"}, ResourceNames: []string{"cp-1"}},
		rbacv1.PolicyRule{APIGroups: []string{"ichor.dev"}, Resources: []string{"taloscredentialrequests"}, Verbs: []string{"create"}})
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err = CP.Kubectl(ctx, "--as=gina", "get", "--raw", path)
		return err == nil, nil
	})
	if err != nil {
		t.Errorf("gina, who may download cp-1's bundle by name, could not: %v", err)
	} else if _, err := zip.NewReader(strings.NewReader(out), int64(len(out))); err != nil {
		t.Errorf("gina's bundle of cp-1 (%d bytes) is not a zip archive: %v", len(out), err)
	}
	_, err = CP.Kubectl(ctx, "--as=gina", "get", "--raw", MachinePath(ns, "worker-1", "support-bundle"))
	WantKubectlError(t, "support bundle of a machine not named in the grant", err,
		"Forbidden", `cannot download talosmachines/support-bundle "worker-1"`)
}

// CheckPacketCaptureDownload captures a second of worker-1's eth0 as an
// admin and reads the pcap file; bad options are refused with the field.
func CheckPacketCaptureDownload(ctx context.Context, t *testing.T, ns string) {
	path := MachinePath(ns, "worker-1", "packet-capture")
	admin := []string{"--as=carol", "--as-group=ichor:admin", "get", "--raw"}
	start := time.Now()
	out, err := CP.Kubectl(ctx, append(admin, path+"?interface=eth0&durationSeconds=1&snapLength=128")...)
	if err != nil {
		t.Fatalf("kubectl get --raw %s: %v", path, err)
	}
	t.Logf("a one-second capture took %s", time.Since(start).Round(time.Millisecond))
	pcap := []byte(out)
	if len(pcap) < 24 {
		t.Fatalf("capture of %d bytes, want a pcap header at least", len(pcap))
	}
	if magic, snap := binary.LittleEndian.Uint32(pcap), binary.LittleEndian.Uint32(pcap[16:]); magic != 0xa1b2c3d4 || snap != 128 {
		t.Errorf("pcap header: magic %#x, snap length %d; want 0xa1b2c3d4 and 128", magic, snap)
	}
	records := 0
	for rest := pcap[24:]; len(rest) > 0; records++ {
		if len(rest) < 16 {
			t.Fatalf("a cut record header after %d records", records)
		}
		n := int(binary.LittleEndian.Uint32(rest[8:]))
		if n > 128 || len(rest) < 16+n {
			t.Fatalf("record %d: %d captured bytes of %d left (snap length 128)", records, n, len(rest)-16)
		}
		rest = rest[16+n:]
	}
	if records != talossim.CapturePackets {
		t.Errorf("the capture holds %d packets, want the node's %d", records, talossim.CapturePackets)
	}
	WaitEventSaying(ctx, t, ns, "worker-1", corev1.EventTypeNormal, "Downloaded", "carol downloaded a 1s packet-capture of link eth0 on TalosMachine worker-1")

	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", []string{"PacketCaptureOptions", "interface: Required value"}},
		{"?interface=eth9&durationSeconds=1", []string{"PacketCaptureOptions", `interface: Not found: "eth9"`}},
		{"?interface=eth0&durationSeconds=86400", []string{"durationSeconds: Invalid value: 86400", "between 1 and 3600"}},
		{"?interface=eth0&snapLength=-1", []string{"snapLength: Invalid value: -1"}},
		{"?interface=eth0/../x", []string{"interface: Invalid value", "not a link name"}},
	} {
		_, err := CP.Kubectl(ctx, append(admin, path+c.query)...)
		WantKubectlError(t, "capture with "+c.query, err, c.want...)
	}
	_, err = CP.Kubectl(ctx, "--as=olivia", "--as-group=ichor:operator", "get", "--raw", path+"?interface=eth0")
	WantKubectlError(t, "operator capture", err, "Forbidden")
}

// CheckCutPacketCapture starts a minute-long capture of worker-1's eth0 and
// cuts the node off once the download has started: the client must see the
// download fail, not receive a short pcap file with a 200.
func CheckCutPacketCapture(ctx context.Context, t *testing.T, ns string, node *talossim.Node) {
	path := MachinePath(ns, "worker-1", "packet-capture") + "?interface=eth0&durationSeconds=60"
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := CP.Kubectl(ctx, "--as=carol", "--as-group=ichor:admin", "get", "--raw", path)
		done <- result{out, err}
	}()
	// The Event is recorded once the node's first bytes have arrived.
	WaitEventSaying(ctx, t, ns, "worker-1", corev1.EventTypeNormal, "Downloaded", "carol downloaded a 1m0s packet-capture of link eth0 on TalosMachine worker-1")
	if err := node.SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	res := <-done
	node.ClearFaults()
	var kerr *harness.KubectlError
	if !errors.As(res.err, &kerr) {
		t.Errorf("a capture cut after %d bytes ended as a complete file (error %v)", len(res.out), res.err)
	} else if ctx.Err() != nil {
		t.Errorf("the cut capture did not end within 45s: %v", res.err)
	} else {
		t.Logf("the cut capture failed for the client: %s", strings.TrimSpace(kerr.Stderr))
	}
	WaitMachine(context.Background(), t, ns, "worker-1", "Ready again", func(m *v1alpha1.TalosMachine) bool {
		return m.Status.Phase == v1alpha1.MachinePhaseReady
	})
}

// CheckTalosconfigReaderDownload downloads demo's reader talosconfig as an
// operator and uses it with talosctl: it reads, and may do nothing else.
func CheckTalosconfigReaderDownload(ctx context.Context, t *testing.T, ns string, nodes map[string]*talossim.Node) {
	path := "/apis/ichor.dev/v1alpha1/namespaces/" + ns + "/talosclusters/demo/talosconfig-reader"
	out, err := CP.Kubectl(ctx, "--as=olivia", "--as-group=ichor:operator", "get", "--raw", path)
	if err != nil {
		t.Fatalf("kubectl get --raw %s: %v", path, err)
	}
	cfg, err := config.FromBytes([]byte(out))
	if err != nil {
		t.Fatalf("the download is not a talosconfig: %v\n%s", err, out)
	}
	contextName := ns + "/demo-reader"
	tc, ok := cfg.Contexts[contextName]
	if cfg.Context != contextName || !ok {
		t.Fatalf("talosconfig context %q with contexts %v, want %q", cfg.Context, slices.Collect(maps.Keys(cfg.Contexts)), contextName)
	}
	var want []string
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		want = append(want, nodes[name].Addr())
	}
	slices.Sort(want)
	if !slices.Equal(tc.Endpoints, want) {
		t.Errorf("endpoints %v, want the control planes' %v", tc.Endpoints, want)
	}
	crt, err := base64.StdEncoding.DecodeString(tc.Crt)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(crt)
	if block == nil {
		t.Fatalf("the talosconfig's crt is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cert.Subject.Organization, []string{string(role.Reader)}) || cert.Subject.CommonName != "olivia" {
		t.Errorf("certificate subject %v, want O=[os:reader] CN=olivia", cert.Subject)
	}
	if lifetime := cert.NotAfter.Sub(cert.NotBefore); lifetime > time.Hour || lifetime < 50*time.Minute {
		t.Errorf("certificate valid for %s, want an hour", lifetime)
	}
	WaitEventSaying(ctx, t, ns, "demo", corev1.EventTypeNormal, "Downloaded", "olivia downloaded a talosconfig-reader talosconfig of TalosCluster demo")

	// talosctl reads with it, and may not back up etcd.
	dir := t.TempDir()
	file := filepath.Join(dir, "talosconfig")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	run := TalosctlOn(ctx, t, nodes["cp-1"])
	talosctl := func(args ...string) (string, error) { return run(file, args...) }
	if out, err := talosctl("version"); err != nil || !strings.Contains(out, "Tag:") {
		t.Errorf("talosctl version with the reader talosconfig: %v\n%s", err, out)
	}
	if out, err := talosctl("etcd", "snapshot", "db.snapshot"); err == nil || !strings.Contains(out, "PermissionDenied") {
		t.Errorf("talosctl etcd snapshot with the reader talosconfig: %v, want PermissionDenied\n%s", err, out)
	}

	_, err = CP.Kubectl(ctx, "--as=vera", "--as-group=ichor:viewer", "get", "--raw", path)
	WantKubectlError(t, "viewer talosconfig", err, "Forbidden")
}
