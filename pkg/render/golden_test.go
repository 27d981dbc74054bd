package render

import (
	"bytes"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

var updateGolden = flag.Bool("update", false, "write testdata/golden from the renders instead of comparing")

// goldenCase is one machine's render that must not change unless on purpose.
type goldenCase struct {
	name  string
	input func(t *testing.T) Input
}

// goldenCases cover what Ichor adds to machinery's generated config: each
// role, a hostname, patches at each scope, disk encryption, OIDC trust,
// kubelet serving certificates verified from the API server, Cilium, the
// installer image and a CA rotation's accepted CAs.
func goldenCases(version string) []goldenCase {
	full := func(t *testing.T, role ichorv1alpha1.MachineRole) Input {
		m := testMachine("node-1", role, map[string]string{"tier": "a"})
		in := testInput(t, m,
			testPatch("cluster-wide", 0, ichorv1alpha1.PatchTarget{}, "machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"250\"\n"),
			testPatch("by-label", 10, ichorv1alpha1.PatchTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "a"}}},
				nodeLabelPatch("label")),
			testPatch("by-name", 20, ichorv1alpha1.PatchTarget{Machines: []string{"node-1"}}, "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"))
		in.Cluster.Spec.TalosVersion, in.Cluster.Spec.KubernetesVersion = version, goldenKubernetes
		in.Cluster.Spec.Network.CNI = ichorv1alpha1.CNISpec{Name: ichorv1alpha1.CNICilium}
		in.Cluster.Spec.Security.DiskEncryption = &ichorv1alpha1.DiskEncryption{Key: ichorv1alpha1.DiskEncryptionKeyNodeID}
		in.Cluster.Spec.Security.KubeletServingCertificates = ichorv1alpha1.KubeletServingCertificates{Enabled: true, VerifyFromAPIServer: true}
		in.Cluster.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.ClusterConditionKubeletServingVerified, Status: metav1.ConditionTrue}}
		in.Cluster.Spec.Authentication = &ichorv1alpha1.ClusterAuthentication{IssuerURL: "https://issuer.example.com/realms/x",
			ClientID: "kubernetes", UsernameClaim: "email", GroupsClaim: "groups", CABundle: goldenCAPEM}
		in.InstallImage = "mirror.example.com/siderolabs/installer:" + version
		in.TalosAcceptedCAs = [][]byte{[]byte(goldenCAPEM)}
		in.KubernetesAcceptedCAs = [][]byte{[]byte(goldenCAPEM)}
		return in
	}
	plain := func(t *testing.T, role ichorv1alpha1.MachineRole) Input {
		in := testInput(t, testMachine("node-1", role, nil))
		in.Cluster.Spec.TalosVersion, in.Cluster.Spec.KubernetesVersion = version, goldenKubernetes
		return in
	}
	return []goldenCase{
		{"controlplane", func(t *testing.T) Input { return plain(t, ichorv1alpha1.MachineRoleControlPlane) }},
		{"worker", func(t *testing.T) Input { return plain(t, ichorv1alpha1.MachineRoleWorker) }},
		{"controlplane-full", func(t *testing.T) Input { return full(t, ichorv1alpha1.MachineRoleControlPlane) }},
		{"worker-full", func(t *testing.T) Input { return full(t, ichorv1alpha1.MachineRoleWorker) }},
	}
}

// goldenKubernetes is fixed, not machinery's default, which moves with it.
const goldenKubernetes = "v1.36.0"

// goldenCAPEM is a fixed CA certificate (an OIDC issuer's, and a rotation's
// other CA), made once with openssl; its key was thrown away.
const goldenCAPEM = `-----BEGIN CERTIFICATE-----
MIIBeDCCAR6gAwIBAgIBATAKBggqhkjOPQQDAjAbMRkwFwYDVQQDDBBnb2xkZW4g
aXNzdWVyIENBMB4XDTI2MTIwNzA3NTYyMVoXDTM2MTIwNDA3NTYyMVowGzEZMBcG
A1UEAwwQZ29sZGVuIGlzc3VlciBDQTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IA
BEH9w9RNml5aM17XkjQLc+Pms7kHXe1m38U/vbVzyUEnfJC8D1ViNxQuIXIEq2XA
t32m9ZmzWXGgZpRwxcTSEN6jUzBRMB0GA1UdDgQWBBRYnAz9KHev2l3yxippPEce
f8IcMzAfBgNVHSMEGDAWgBRYnAz9KHev2l3yxippPEcef8IcMzAPBgNVHRMBAf8E
BTADAQH/MAoGCCqGSM49BAMCA0gAMEUCID7sh5W0akV44xEHlVqbjnWoNEg0w3sH
gfBPbmXSlMaJAiEAsFD8tjbc1j8Ne0VUHYHxDNmJ2geiLbwL5rDLNZTsI9M=
-----END CERTIFICATE-----
`

// TestRenderGolden compares each case's render with testdata/golden, the
// bundle's secrets written as their names (the bundle is made anew per
// test binary). go test ./pkg/render -run TestRenderGolden -update writes them.
func TestRenderGolden(t *testing.T) {
	for _, version := range []string{"v1.13.0"} {
		for _, c := range goldenCases(version) {
			t.Run(version+"/"+c.name, func(t *testing.T) {
				out, err := Render(c.input(t))
				if err != nil {
					t.Fatal(err)
				}
				got := redactBundle(t, out.Config)
				path := filepath.Join("testdata", "golden", version, c.name+".yaml")
				if *updateGolden {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (write it with -update)", err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("the render of %s changed; the first different line:\n%s", path, firstDifference(want, got))
				}
			})
		}
	}
}

// redactBundle writes every secret of the test bundle in config as its
// path in the bundle, in the forms the config holds it (as is and base64).
func redactBundle(t *testing.T, config []byte) []byte {
	t.Helper()
	raw, err := yaml.Marshal(testBundle(t))
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := yaml.Unmarshal(raw, &tree); err != nil {
		t.Fatal(err)
	}
	type leaf struct{ path, value string }
	var leaves []leaf
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		case string:
			if len(v) >= 16 { // secrets; not versions or booleans
				leaves = append(leaves, leaf{path, v}, leaf{path + "(base64)", base64.StdEncoding.EncodeToString([]byte(v))})
			}
		}
	}
	walk("bundle", tree)
	// Longest first: no value is replaced inside a longer one.
	slices.SortFunc(leaves, func(a, b leaf) int { return len(b.value) - len(a.value) })
	out := string(config)
	for _, l := range leaves {
		out = strings.ReplaceAll(out, l.value, "<"+l.path+">")
	}
	return []byte(out)
}

func firstDifference(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d\n  want: %s\n  got:  %s", i+1, wl, gl)
		}
	}
	return "(none)"
}
