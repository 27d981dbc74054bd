package render

import (
	"slices"
	"testing"
)

func TestTouchedSecrets(t *testing.T) {
	cases := []struct {
		name  string
		patch string
		want  []string
	}{
		{name: "harmless strategic merge", patch: "machine:\n  kubelet:\n    extraArgs:\n      v: \"2\"\n"},
		{name: "harmless JSON6902", patch: `[{"op": "add", "path": "/machine/nodeLabels", "value": {"a": "b"}}]`},
		{name: "other document with a $patch", patch: "apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n"},
		{name: "sibling of a secret", patch: "cluster:\n  etcd:\n    extraArgs:\n      quota-backend-bytes: \"1\"\n"},

		{name: "machine.ca", patch: "machine:\n  ca:\n    crt: Zm9v\n    key: YmFy\n", want: []string{"machine.ca"}},
		{name: "machine.token", patch: "machine:\n  token: abc.def\n", want: []string{"machine.token"}},
		{name: "machine.acceptedCAs", patch: "machine:\n  acceptedCAs:\n    - crt: Zm9v\n", want: []string{"machine.acceptedCAs"}},
		{name: "cluster secrets", patch: "cluster:\n  id: x\n  secret: y\n  token: z\n  secretboxEncryptionSecret: s\n  aescbcEncryptionSecret: a\n",
			want: []string{"cluster.aescbcEncryptionSecret", "cluster.id", "cluster.secret", "cluster.secretboxEncryptionSecret", "cluster.token"}},
		{name: "cluster CAs", patch: "cluster:\n  ca:\n    crt: Zm9v\n  aggregatorCA:\n    crt: Zm9v\n  serviceAccount:\n    key: Zm9v\n  acceptedCAs: []\n",
			want: []string{"cluster.acceptedCAs", "cluster.aggregatorCA", "cluster.ca", "cluster.serviceAccount"}},
		{name: "cluster.etcd.ca", patch: "cluster:\n  etcd:\n    ca:\n      crt: Zm9v\n", want: []string{"cluster.etcd.ca"}},
		{name: "null value still touches", patch: "machine:\n  token: null\n", want: []string{"machine.token"}},
		{name: "$patch delete on an ancestor", patch: "cluster:\n  etcd:\n    $patch: delete\n", want: []string{"cluster.etcd.ca"}},
		{name: "ancestor replaced by a scalar", patch: "cluster:\n  etcd: null\n", want: []string{"cluster.etcd.ca"}},
		{name: "YAML alias cannot hide it", patch: "machine:\n  nodeLabels: &x\n    crt: YQ==\n  ca: *x\n", want: []string{"machine.ca"}},
		{name: "second document", patch: "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: a\n---\nmachine:\n  token: abc.def\n", want: []string{"machine.token"}},

		{name: "JSON6902 replace", patch: `[{"op": "replace", "path": "/cluster/token", "value": "x"}]`, want: []string{"cluster.token"}},
		{name: "JSON6902 below a secret", patch: `[{"op": "replace", "path": "/cluster/etcd/ca/key", "value": "x"}]`, want: []string{"cluster.etcd.ca"}},
		{name: "JSON6902 array element", patch: `[{"op": "add", "path": "/machine/acceptedCAs/-", "value": {"crt": "x"}}]`, want: []string{"machine.acceptedCAs"}},
		{name: "JSON6902 ancestor removed", patch: `[{"op": "remove", "path": "/cluster/etcd"}]`, want: []string{"cluster.etcd.ca"}},
		{name: "JSON6902 copy out of a secret", patch: `[{"op": "copy", "from": "/cluster/secret", "path": "/machine/nodeLabels/leak"}]`, want: []string{"cluster.secret"}},
		{name: "JSON6902 as YAML", patch: "- op: remove\n  path: /machine/ca\n", want: []string{"machine.ca"}},
		{name: "JSON6902 whole machine", patch: `[{"op": "remove", "path": "/machine"}]`, want: []string{"machine.acceptedCAs", "machine.ca", "machine.token"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TouchedSecrets(tc.patch)
			if err != nil {
				t.Fatalf("TouchedSecrets: %v", err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("touched %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTouchedSecretsRefusesUnreadablePatch(t *testing.T) {
	if got, err := TouchedSecrets("machine: [unclosed\n"); err == nil {
		t.Fatalf("an unreadable patch passed the guard with %v", got)
	}
}
