package render

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// wgKey is a WireGuard key's form.
const wgKey = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq="

func TestClassifyPatch(t *testing.T) {
	for _, tc := range []struct {
		name, patch string
		want        PatchClass
	}{
		{"a network sysctl", "machine:\n  sysctls:\n    net.core.somaxconn: \"65535\"\n", ClassSettings},
		{"a hostname", "machine:\n  network:\n    hostname: n1\n", ClassSettings},
		{"node labels", "machine:\n  nodeLabels:\n    zone: a\n", ClassSettings},
		{"a HostnameConfig document", "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: n1\nauto: off\n", ClassSettings},
		{"the core pattern, a kernel program hook", "machine:\n  sysctls:\n    kernel.core_pattern: \"|/var/evil\"\n", ClassPrivileged},
		{"a static pod mounting the secrets", `machine:
  pods:
    - apiVersion: v1
      kind: Pod
      metadata: {name: steal}
      spec:
        containers: [{name: c, image: busybox}]
        volumes: [{name: s, hostPath: {path: /system/secrets}}]
`, ClassPrivileged},
		{"a static pod as JSON6902", `- op: add
  path: /machine/pods
  value:
    - {apiVersion: v1, kind: Pod, metadata: {name: steal}}
`, ClassPrivileged},
		{"inline manifests", "cluster:\n  inlineManifests:\n    - name: x\n      contents: \"apiVersion: v1\\nkind: Namespace\\nmetadata: {name: x}\\n\"\n", ClassPrivileged},
		{"extra manifests", "cluster:\n  extraManifests:\n    - https://example.invalid/m.yaml\n", ClassPrivileged},
		{"Talos API access for os:admin", `machine:
  features:
    kubernetesTalosAPIAccess:
      enabled: true
      allowedRoles: ["os:admin"]
      allowedKubernetesNamespaces: [default]
`, ClassPrivileged},
		{"the installer image", "machine:\n  install:\n    image: evil/installer:v1\n", ClassPrivileged},
		{"API server flags", "cluster:\n  apiServer:\n    extraArgs:\n      anonymous-auth: \"true\"\n", ClassPrivileged},
		{"a host file", "machine:\n  files:\n    - {content: x, permissions: 0o644, path: /var/f, op: create}\n", ClassPrivileged},
		{"kubelet host mounts", "machine:\n  kubelet:\n    extraMounts:\n      - {destination: /s, type: bind, source: /system/secrets, options: [bind, rw]}\n", ClassPrivileged},
		{"registry auth", "machine:\n  registries:\n    config:\n      r.example.invalid:\n        auth: {username: u, password: p}\n", ClassPrivileged},
		{"a plain document and a static pod", "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: n1\nauto: off\n---\nmachine:\n  pods:\n    - {apiVersion: v1, kind: Pod, metadata: {name: p}}\n", ClassPrivileged},
		{"an extension service", "apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: x\n", ClassPrivileged},
		{"the install disk", "machine:\n  install:\n    disk: /dev/sdb\n", ClassSettings},
		{"deleting the whole kubelet section", "machine:\n  kubelet:\n    $patch: delete\n", ClassPrivileged},
		{"the bundle's CA", "machine:\n  ca:\n    crt: eA==\n    key: eA==\n", ClassBundle},
		{"deleting the cluster section", "cluster:\n  $patch: delete\n", ClassBundle},
		{"a JSON6902 copy out of the bundle", "- op: copy\n  from: /cluster/secret\n  path: /cluster/clusterName\n", ClassBundle},
		{"an alias hiding a pod", "machine:\n  nodeLabels: &l {zone: a}\n  pods:\n    - {apiVersion: v1, kind: Pod, metadata: {name: p, labels: *l}}\n", ClassPrivileged},
		{"a static key slot on STATE", "apiVersion: v1alpha1\nkind: VolumeConfig\nname: STATE\nencryption:\n  provider: luks2\n  keys:\n    - slot: 1\n      static: {passphrase: known}\n", ClassPrivileged},
		{"STATE's encryption deleted", "apiVersion: v1alpha1\nkind: VolumeConfig\nname: STATE\n$patch: delete\n", ClassPrivileged},
		{"STATE mounted for workloads", "apiVersion: v1alpha1\nkind: ExistingVolumeConfig\nname: state\ndiscovery:\n  volumeSelector:\n    match: volume.partition_label == \"STATE\"\n", ClassPrivileged},
		{"a raw partition", "apiVersion: v1alpha1\nkind: RawVolumeConfig\nname: raw\nprovisioning:\n  diskSelector:\n    match: system_disk\n  maxSize: 1GiB\n", ClassPrivileged},
		{"swap on disk", "apiVersion: v1alpha1\nkind: SwapVolumeConfig\nname: swap\nprovisioning:\n  diskSelector:\n    match: system_disk\n  maxSize: 1GiB\n", ClassPrivileged},
		{"a user volume", "apiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\nprovisioning:\n  diskSelector:\n    match: \"!system_disk\"\n  maxSize: 10GiB\n", ClassSettings},
		{"the firewall opened", "apiVersion: v1alpha1\nkind: NetworkDefaultActionConfig\ningress: accept\n", ClassPrivileged},
		{"a firewall rule", "apiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: etcd\nportSelector:\n  ports: [2379]\n  protocol: tcp\ningress:\n  - subnet: 0.0.0.0/0\n", ClassPrivileged},
		{"a WireGuard document", "apiVersion: v1alpha1\nkind: WireguardConfig\nname: wg0\nprivateKey: " + wgKey + "\n", ClassPrivileged},
		{"a WireGuard interface", "machine:\n  network:\n    interfaces:\n      - interface: wg0\n        wireguard:\n          privateKey: " + wgKey + "\n", ClassPrivileged},
		{"a WireGuard key as JSON6902", "- op: add\n  path: /machine/network\n  value:\n    interfaces:\n      - {interface: wg0, wireguard: {privateKey: " + wgKey + "}}\n", ClassPrivileged},
		{"an interface's addresses", "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [10.5.0.10/24]\n        routes:\n          - {network: 0.0.0.0/0, gateway: 10.5.0.1}\n", ClassSettings},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fields, err := ClassifyPatch(tc.patch)
			if err != nil {
				t.Fatalf("ClassifyPatch: %v", err)
			}
			if got := StrongestClass(fields); got != tc.want {
				t.Errorf("class %s, want %s; fields %+v", got, tc.want, fields)
			}
		})
	}
}

// TestClassOfListItems: a rule's "*" is any list item, whichever way a
// patch names it; writing a whole item or list writes the WireGuard
// section it may hold.
func TestClassOfListItems(t *testing.T) {
	for path, want := range map[string]PatchClass{
		"machine.network.interfaces.*.wireguard.privateKey": ClassPrivileged,
		"machine.network.interfaces.0.wireguard":            ClassPrivileged,
		"machine.network.interfaces.*":                      ClassPrivileged,
		"machine.network.interfaces":                        ClassPrivileged,
		"machine.network.interfaces.*.addresses.*":          ClassSettings,
		"machine.network.interfaces.-.addresses":            ClassSettings,
		"machine.network.interfaces.*.vlans.*.vlanId":       ClassSettings,
	} {
		if got, why := classOf(strings.Split(path, ".")); got != want {
			t.Errorf("%s: %s (%s), want %s", path, got, why, want)
		}
	}
}

func TestClassifyPatchRefusesWhatItCannotRead(t *testing.T) {
	for _, patch := range []string{"machine: [", "machine:\n  noSuchField: 1\n"} {
		if _, err := ClassifyPatch(patch); err == nil {
			t.Errorf("ClassifyPatch(%q) passed", patch)
		}
	}
}

// TestEveryDocumentKindHasAClass: every document kind machinery registers
// (read from its source, so an upgrade that adds one fails here) is decided
// in documentClasses, and so are talosdocs' kinds.
func TestEveryDocumentKindHasAClass(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/siderolabs/talos/pkg/machinery").Output()
	if err != nil {
		t.Fatalf("find machinery's source: %v", err)
	}
	kinds := map[string]bool{k8s.KubeletConfig: true}
	root := filepath.Join(strings.TrimSpace(string(out)), "config", "types")
	err = filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		if err != nil {
			return err
		}
		for _, pkg := range pkgs {
			consts := map[string]string{}
			var registered []ast.Expr
			for _, f := range pkg.Files {
				ast.Inspect(f, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.ValueSpec:
						for i, name := range n.Names {
							if i < len(n.Values) {
								if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
									consts[name.Name], _ = strconv.Unquote(lit.Value)
								}
							}
						}
					case *ast.CallExpr:
						if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Register" && len(n.Args) == 2 {
							if x, ok := sel.X.(*ast.Ident); ok && x.Name == "registry" {
								registered = append(registered, n.Args[0])
							}
						}
					}
					return true
				})
			}
			for _, arg := range registered {
				switch a := arg.(type) {
				case *ast.BasicLit:
					kind, _ := strconv.Unquote(a.Value)
					kinds[kind] = true
				case *ast.Ident:
					kind, ok := consts[a.Name]
					if !ok {
						return fmt.Errorf("%s: registry.Register(%s): not a string constant of the package", dir, a.Name)
					}
					kinds[kind] = true
				default:
					return fmt.Errorf("%s: registry.Register with a %T", dir, arg)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	delete(kinds, v1alpha1Key)
	if len(kinds) < 40 {
		t.Fatalf("found %d kinds in %s, machinery v1.13 has 45: is the walk broken?", len(kinds), root)
	}
	for kind := range kinds {
		if _, ok := documentClasses[kind]; !ok {
			t.Errorf("document kind %s has no class in documentClasses: decide whether an operator may write it", kind)
		}
	}
	for kind := range documentClasses {
		if !kinds[kind] {
			t.Errorf("documentClasses names %s, which machinery does not know", kind)
		}
	}
}

// TestRenderedSecurityIsPrivileged walks what Ichor itself renders: every
// document kind of a rendered config is decided in documentClasses, and
// every field and document the cluster's security options render (disk
// encryption and its key rotation, the SecureBoot installer, kubelet serving
// certificates and their verification, OIDC trust, a CA rotation's accepted
// CAs) is an admin's to write, on either role and layout.
func TestRenderedSecurityIsPrivileged(t *testing.T) {
	ca := testCAPEM(t)
	for _, version := range []string{testTalosVersion, "v1.14.0"} {
		for _, role := range []ichorv1alpha1.MachineRole{ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.MachineRoleWorker} {
			t.Run(version+"/"+string(role), func(t *testing.T) {
				in := testInput(t, testMachine("m-1", role, nil))
				in.Cluster.Spec.TalosVersion = version
				in.InstallImage = "ghcr.io/siderolabs/installer"
				plain, err := Render(in)
				if err != nil {
					t.Fatal(err)
				}
				c := in.Cluster
				c.Spec.Security = ichorv1alpha1.ClusterSecurity{
					KubeletServingCertificates: ichorv1alpha1.KubeletServingCertificates{Enabled: true, VerifyFromAPIServer: true},
					DiskEncryption:             &ichorv1alpha1.DiskEncryption{Key: ichorv1alpha1.DiskEncryptionKeyTPM},
					SecureBoot:                 ichorv1alpha1.SecureBootRequirement{InstallerImage: "factory.test/installer-secureboot/abc"},
				}
				c.Spec.Authentication = &ichorv1alpha1.ClusterAuthentication{IssuerURL: "https://issuer.example.com", ClientID: "kubernetes",
					UsernameClaim: "email", GroupsClaim: "groups", CABundle: ca}
				c.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.ClusterConditionKubeletServingVerified, Status: metav1.ConditionTrue}}
				c.Status.DiskKeyRotation = &ichorv1alpha1.DiskKeyRotationStatus{Operation: "rotate", Phase: ichorv1alpha1.DiskKeyRotationAddNew, Slot: 1}
				in.TalosAcceptedCAs, in.KubernetesAcceptedCAs = [][]byte{[]byte(ca)}, [][]byte{[]byte(ca)}
				secure, err := Render(in)
				if err != nil {
					t.Fatal(err)
				}

				before, err := documents(plain.Config)
				if err != nil {
					t.Fatal(err)
				}
				after, err := documents(secure.Config)
				if err != nil {
					t.Fatal(err)
				}
				for _, docs := range []map[string]document{before, after} {
					for key, doc := range docs {
						if _, ok := documentClasses[doc.kind]; key != v1alpha1Key && !ok {
							t.Errorf("Ichor renders a %s document, which has no class in documentClasses", doc.kind)
						}
					}
				}
				var seen []string
				for _, key := range unionKeys(before, after) {
					for _, path := range fieldDiff(before[key].body, after[key].body, nil) {
						class, why := classOf(path)
						name := strings.Join(path, ".")
						if key != v1alpha1Key {
							class, why = documentClass(after[key].kind)
							name = key + ":" + name
						}
						seen = append(seen, name)
						if classRank[class] < classRank[ClassPrivileged] {
							t.Errorf("Ichor renders %s for security, and an operator may write it: %s (%s)", name, class, why)
						}
					}
				}
				wants := []string{"VolumeConfig/STATE:encryption", "VolumeConfig/EPHEMERAL:encryption", "machine.install.image", "machine.acceptedCAs"}
				if version != testTalosVersion {
					wants = []string{"VolumeConfig/STATE:encryption", "VolumeConfig/EPHEMERAL:encryption", "UnattendedInstallConfig:installer.image",
						"machine.acceptedCAs", "KubeAPIServerCAConfig:acceptedCAs", "KubeletConfig:config.serverTLSBootstrap"}
					if role == ichorv1alpha1.MachineRoleControlPlane {
						wants = append(wants, "KubeAuthenticationConfig:configuration.jwt", "KubeAPIServerConfig:extraArgs.kubelet-certificate-authority")
					}
				}
				for _, want := range wants {
					if !slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, want) }) {
						t.Errorf("the security options did not render %s; rendered %v", want, seen)
					}
				}
			})
		}
	}
}
