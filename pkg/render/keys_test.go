package render

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

func testPublicKey(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// TestRenderKubernetesKeys: a key rotation's other service-account key and
// its secretbox keys go into a v1.14 control plane's KubeServiceAccountConfig
// and KubeEtcdEncryptionConfig, in order, each with its name; a worker has
// neither; a change of them restarts kube-apiserver; a v1.13 contract, and
// keys that are not keys, are refused.
func TestRenderKubernetesKeys(t *testing.T) {
	accepted := testPublicKey(t)
	secret := base64.StdEncoding.EncodeToString(make([]byte, 32))
	keys := []EncryptionKey{{Name: "key3", Secret: secret}, {Name: "key2", Secret: testBundle(t).Secrets.SecretboxEncryptionSecret}}

	for _, role := range []ichorv1alpha1.MachineRole{ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.MachineRoleWorker} {
		in := testInput(t, testMachine("m", role, nil))
		in.Cluster.Spec.TalosVersion = "v1.14.1"
		plain, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		in.ServiceAccountAcceptedKeys, in.EncryptionKeys = [][]byte{accepted}, keys
		rotating, err := Render(in)
		if err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		if role == ichorv1alpha1.MachineRoleWorker {
			if rotating.Hash != plain.Hash {
				t.Errorf("a worker's config changed with the control planes' keys")
			}
			continue
		}
		cfg, err := configloader.NewFromBytes(rotating.Config)
		if err != nil {
			t.Fatal(err)
		}
		// The issuing key's public key first, then those accepted besides.
		if got := cfg.K8sServiceAccountConfig().AcceptedKeys(); len(got) != 2 || string(got[1].Key) != string(accepted) {
			t.Errorf("accepted service-account keys: %d", len(got))
		}
		var names []string
		for _, r := range cfg.K8sEtcdEncryptionConfig().EtcdEncryptionConfig()["resources"].([]any) {
			for _, p := range r.(map[string]any)["providers"].([]any) {
				if box, ok := p.(map[string]any)["secretbox"].(map[string]any); ok {
					for _, k := range box["keys"].([]any) {
						names = append(names, k.(map[string]any)["name"].(string))
					}
				}
			}
		}
		if strings.Join(names, ",") != "key3,key2" {
			t.Errorf("secretbox keys %v, want key3,key2", names)
		}
		if effect, _, err := Classify(plain.Config, rotating.Config, ApplyLive); err != nil || effect != ichorv1alpha1.ConfigEffectAPIServerRestart {
			t.Errorf("the keys' change: %s %v, want APIServerRestart", effect, err)
		}
	}

	for name, c := range map[string]struct {
		version  string
		accepted [][]byte
		keys     []EncryptionKey
		want     string
	}{
		"a v1.13 contract":  {"v1.13.0", [][]byte{accepted}, nil, "needs the v1.14 contract"},
		"not a public key":  {"v1.14.1", [][]byte{[]byte("-----BEGIN EC PRIVATE KEY-----\nAA==\n-----END EC PRIVATE KEY-----\n")}, nil, "not a PEM public key"},
		"a name twice":      {"v1.14.1", nil, []EncryptionKey{{"k", secret}, {"k", secret}}, `name "k" is empty or taken`},
		"a short secretbox": {"v1.14.1", nil, []EncryptionKey{{"k", "c2hvcnQ="}}, "base64 of 32 bytes"},
	} {
		in := testInput(t, testMachine("m", ichorv1alpha1.MachineRoleControlPlane, nil))
		in.Cluster.Spec.TalosVersion, in.ServiceAccountAcceptedKeys, in.EncryptionKeys = c.version, c.accepted, c.keys
		_, err := Render(in)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an InputError saying %q", name, err, c.want)
		}
	}
}
