package render

import (
	"testing"
)

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

func TestClassifyPatchRefusesWhatItCannotRead(t *testing.T) {
	for _, patch := range []string{"machine: [", "machine:\n  noSuchField: 1\n"} {
		if _, err := ClassifyPatch(patch); err == nil {
			t.Errorf("ClassifyPatch(%q) passed", patch)
		}
	}
}
