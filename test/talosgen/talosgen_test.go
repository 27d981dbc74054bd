// Package talosgen checks Ichor's renders against the official talosctl's
// gen config of each Talos version Ichor manages: for the same secrets and
// inputs, every document must match, but for the differences Ichor makes on
// purpose, each listed below with why.
package talosgen

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/test/internal/proc"
)

// A version Ichor manages; talosctl gen config of that version is compared.
type version struct {
	talos    string // the cluster's spec.talosVersion
	contract string // what talosctl gen config --talos-version takes
}

var versions = []version{
	{talos: "v1.13.0", contract: "v1.13"},
	{talos: "v1.14.1", contract: "v1.14"},
}

// difference is a field (document key, then dotted path) where Ichor's
// render differs from talosctl's on purpose, in the roles and setups it
// applies to.
type difference struct {
	field  string
	roles  []ichorv1alpha1.MachineRole
	setups []string
	why    string
}

var (
	both          = []ichorv1alpha1.MachineRole{ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.MachineRoleWorker}
	controlPlanes = []ichorv1alpha1.MachineRole{ichorv1alpha1.MachineRoleControlPlane}
	everySetup    = []string{"plain", "secured"}
	secured       = []string{"secured"}
)

// setups are the clusters compared: as created with no option, and with
// every option that adds to the config.
var setups = map[string]func(*ichorv1alpha1.TalosCluster){
	"plain": func(*ichorv1alpha1.TalosCluster) {},
	"secured": func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.Network.CNI = ichorv1alpha1.CNISpec{Name: ichorv1alpha1.CNICilium}
		c.Spec.Security.DiskEncryption = &ichorv1alpha1.DiskEncryption{Key: ichorv1alpha1.DiskEncryptionKeyNodeID}
		c.Spec.Security.KubeletServingCertificates = ichorv1alpha1.KubeletServingCertificates{Enabled: true, VerifyFromAPIServer: true}
		c.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.ClusterConditionKubeletServingVerified, Status: metav1.ConditionTrue}}
		c.Spec.Authentication = &ichorv1alpha1.ClusterAuthentication{IssuerURL: "https://issuer.example.com", ClientID: "kubernetes",
			UsernameClaim: "email", GroupsClaim: "groups"}
	},
}

// purposeful lists, per Talos version, every difference Ichor makes: the
// test fails on any other, and on a listed one that no longer occurs.
var purposeful = map[string][]difference{
	"v1.13.0": {
		{"HostnameConfig:hostname", both, everySetup, "the machine's spec.hostname, a fixed name, in place of auto: stable"},
		{"HostnameConfig:auto", both, everySetup, "the machine's spec.hostname, a fixed name, in place of auto: stable"},
		{"v1alpha1:cluster.network.cni", both, secured, "Cilium: Talos installs no CNI (name none), Ichor installs Cilium with the cluster's values"},
		{"VolumeConfig/STATE", both, secured, "spec.security.diskEncryption: STATE encrypted (LUKS2, a key per slot)"},
		{"VolumeConfig/EPHEMERAL", both, secured, "spec.security.diskEncryption: EPHEMERAL encrypted, its key locked to STATE"},
		{"v1alpha1:machine.kubelet.extraConfig", both, secured, "kubeletServingCertificates: serverTLSBootstrap, the kubelet asks for a serving certificate Ichor approves"},
		{"v1alpha1:cluster.apiServer.extraArgs.kubelet-certificate-authority", controlPlanes, secured, "verifyFromAPIServer: kube-apiserver verifies kubelets against the cluster CA"},
		{"v1alpha1:cluster.apiServer.extraArgs.oidc-", controlPlanes, secured, "spec.authentication: kube-apiserver trusts the OIDC issuer, users and groups prefixed oidc:"},
	},
	"v1.14.1": {
		{"HostnameConfig:hostname", both, everySetup, "the machine's spec.hostname, a fixed name, in place of auto: stable"},
		{"HostnameConfig:auto", both, everySetup, "the machine's spec.hostname, a fixed name, in place of auto: stable"},
		{"KubeFlannelCNIConfig", controlPlanes, secured, "Cilium: Talos installs no CNI (no Flannel document), Ichor installs Cilium with the cluster's values"},
		{"VolumeConfig/STATE", both, secured, "spec.security.diskEncryption: STATE encrypted (LUKS2, a key per slot)"},
		{"VolumeConfig/EPHEMERAL:encryption", both, secured, "spec.security.diskEncryption: EPHEMERAL encrypted, its key locked to STATE"},
		{"KubeletConfig:config.serverTLSBootstrap", both, secured, "kubeletServingCertificates: the kubelet asks for a serving certificate Ichor approves"},
		{"KubeAPIServerConfig:extraArgs.kubelet-certificate-authority", controlPlanes, secured, "verifyFromAPIServer: kube-apiserver verifies kubelets against the cluster CA"},
		{"KubeAuthenticationConfig:configuration.jwt", controlPlanes, secured, "spec.authentication: a JWT authenticator for the OIDC issuer, users and groups prefixed oidc:, email_verified required"},
	},
}

const (
	clusterName = "prod"
	endpoint    = "https://10.5.0.2:6443"
	kubernetes  = "1.36.0"
	installDisk = "/dev/sda"
	hostname    = "node-1"
)

func installImage(v version) string { return "mirror.example.com/siderolabs/installer:" + v.talos }

func TestRenderMatchesTalosctlGenConfig(t *testing.T) {
	dir, err := proc.TalosctlBinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		t.Run(v.talos, func(t *testing.T) {
			bundleData, err := secretsbundle.Generate(v.talos, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			bundle, err := secretsbundle.Parse(bundleData)
			if err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			secretsFile := filepath.Join(out, "secrets.yaml")
			if err := os.WriteFile(secretsFile, bundleData, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(t.Context(), filepath.Join(dir, proc.TalosctlOf(v.talos)), "gen", "config", clusterName, endpoint,
				"--with-secrets", secretsFile, "--talos-version", v.contract, "--kubernetes-version", kubernetes,
				"--install-disk", installDisk, "--install-image", installImage(v),
				"--with-docs=false", "--with-examples=false", "--output-dir", out, "--output-types", "controlplane,worker")
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, msg)
			}

			seen := map[string]bool{}
			for setup, apply := range setups {
				for _, role := range both {
					file := map[ichorv1alpha1.MachineRole]string{ichorv1alpha1.MachineRoleControlPlane: "controlplane.yaml", ichorv1alpha1.MachineRoleWorker: "worker.yaml"}[role]
					theirs, err := os.ReadFile(filepath.Join(out, file))
					if err != nil {
						t.Fatal(err)
					}
					c := cluster(v)
					apply(c)
					ours, err := render.Render(render.Input{Cluster: c, Machine: machine(role), Secrets: bundle, InstallImage: installImage(v)})
					if err != nil {
						t.Fatal(err)
					}
					for _, field := range diff(t, documents(t, theirs), documents(t, ours.Config)) {
						i := slices.IndexFunc(purposeful[v.talos], func(d difference) bool {
							return strings.HasPrefix(field, d.field) && slices.Contains(d.roles, role) && slices.Contains(d.setups, setup)
						})
						if i < 0 {
							t.Errorf("%s %s: %s differs from talosctl %s gen config, and no listed purpose explains it", setup, role, field, v.talos)
							continue
						}
						seen[setup+"/"+string(role)+"/"+purposeful[v.talos][i].field] = true
					}
				}
			}
			for _, d := range purposeful[v.talos] {
				for _, setup := range d.setups {
					for _, role := range d.roles {
						if !seen[setup+"/"+string(role)+"/"+d.field] {
							t.Errorf("%s %s: the listed difference %s (%s) no longer occurs: drop it from the list", setup, role, d.field, d.why)
						}
					}
				}
			}
		})
	}
}

func cluster(v version) *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: clusterName},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      v.talos,
			KubernetesVersion: "v" + kubernetes,
			ControlPlane:      ichorv1alpha1.ControlPlaneSpec{Endpoint: endpoint},
		},
	}
}

func machine(role ichorv1alpha1.MachineRole) *ichorv1alpha1.TalosMachine {
	return &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "m-" + string(role)},
		Spec: ichorv1alpha1.TalosMachineSpec{ClusterName: clusterName, Role: role, Address: "10.5.0.10:50000",
			Hostname: hostname, Install: ichorv1alpha1.InstallSpec{Disk: installDisk}},
	}
}

// documents splits a machine config into its documents by key: "v1alpha1",
// else kind, and /name for named ones.
func documents(t *testing.T, data []byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if doc == nil {
			continue
		}
		key := "v1alpha1"
		if kind, ok := doc["kind"].(string); ok {
			key = kind
			if name, ok := doc["name"].(string); ok {
				key += "/" + name
			}
		}
		if _, dup := out[key]; dup {
			t.Fatalf("two %s documents", key)
		}
		out[key] = doc
	}
}

// diff lists the fields (key:path) that differ between two configs' documents.
func diff(t *testing.T, theirs, ours map[string]map[string]any) []string {
	t.Helper()
	var out []string
	keys := map[string]bool{}
	for k := range theirs {
		keys[k] = true
	}
	for k := range ours {
		keys[k] = true
	}
	for k := range keys {
		a, b := theirs[k], ours[k]
		if a == nil || b == nil {
			out = append(out, k)
			continue
		}
		for _, p := range fieldDiff(a, b, "") {
			out = append(out, k+":"+p)
		}
	}
	slices.Sort(out)
	return out
}

// fieldDiff lists the leaf paths where a and b differ; a map one side lacks
// counts as empty, so its leaves are named.
func fieldDiff(a, b any, path string) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && b == nil {
		bm, bok = map[string]any{}, true
	}
	if bok && a == nil {
		am, aok = map[string]any{}, true
	}
	if !aok || !bok {
		if reflect.DeepEqual(a, b) {
			return nil
		}
		return []string{path}
	}
	var out []string
	keys := map[string]bool{}
	for k := range am {
		keys[k] = true
	}
	for k := range bm {
		keys[k] = true
	}
	for k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		out = append(out, fieldDiff(am[k], bm[k], p)...)
	}
	return out
}
