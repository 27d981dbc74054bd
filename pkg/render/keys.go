package render

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
)

// EncryptionKey is a secretbox key kube-apiserver encrypts Secrets at rest
// with. The data it wrote carries its name, so a key keeps its name for
// as long as it is used: the bundle's own is Talos's "key2".
type EncryptionKey struct {
	Name string
	// Secret is the base64 of its 32 bytes.
	Secret string
}

// withKubernetesKeys has a control plane of the v1.14 contract accept the
// service-account public keys accepted besides its issuing one, and
// encrypt Secrets with keys (the first encrypts, each decrypts): the
// phases of a key rotation. A v1.13 contract has one key of each, and no
// place for another.
func withKubernetesKeys(cfg config.Provider, contract *config.VersionContract, accepted [][]byte, keys []EncryptionKey) (config.Provider, error) {
	if len(accepted) == 0 && len(keys) == 0 {
		return cfg, nil
	}
	if !multidoc(contract) {
		return nil, fmt.Errorf("the %s contract has one service-account key and one encryption key, with no place for another: "+
			"rotating them needs the v1.14 contract (KubeServiceAccountConfig, KubeEtcdEncryptionConfig)", contract)
	}
	for i, k := range accepted {
		if b, _ := pem.Decode(k); b == nil || b.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("accepted service-account key %d is not a PEM public key", i)
		} else if _, err := x509.ParsePKIXPublicKey(b.Bytes); err != nil {
			return nil, fmt.Errorf("accepted service-account key %d: %w", i, err)
		}
	}
	seen := map[string]bool{}
	var list []any
	for i, k := range keys {
		secret, err := base64.StdEncoding.DecodeString(k.Secret)
		switch {
		case k.Name == "" || seen[k.Name]:
			return nil, fmt.Errorf("encryption key %d: its name %q is empty or taken", i, k.Name)
		case err != nil || len(secret) != 32:
			return nil, fmt.Errorf("encryption key %s: a secretbox key is the base64 of 32 bytes", k.Name)
		}
		seen[k.Name] = true
		list = append(list, map[string]any{"name": k.Name, "secret": k.Secret})
	}
	var err error
	if len(accepted) > 0 {
		cfg, err = editDocument(cfg, k8s.KubeServiceAccountConfig, nil, func(d *k8s.KubeServiceAccountConfigV1Alpha1) error {
			d.ServiceAccepted.PublicKeys = nil
			for _, k := range accepted {
				d.ServiceAccepted.PublicKeys = append(d.ServiceAccepted.PublicKeys, string(k))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if len(keys) == 0 {
		return cfg, nil
	}
	return editDocument(cfg, k8s.KubeEtcdEncryptionConfig, nil, func(d *k8s.KubeEtcdEncryptionConfigV1Alpha1) error {
		resources, _ := d.Config.Object["resources"].([]any)
		for _, r := range resources {
			r, _ := r.(map[string]any)
			providers, _ := r["providers"].([]any)
			for _, p := range providers {
				if box, ok := p.(map[string]any)["secretbox"].(map[string]any); ok {
					box["keys"] = list
					return nil
				}
			}
		}
		return errors.New("KubeEtcdEncryptionConfig has no secretbox provider to put the keys in")
	})
}

// KubernetesKeys are the service-account keys and secretbox keys a
// control plane's config gives kube-apiserver.
type KubernetesKeys struct {
	// Issuing is the PEM private key that signs service-account tokens.
	Issuing []byte
	// Accepted are the PEM public keys accepted besides it.
	Accepted [][]byte
	// Encryption are the secretbox keys, in order.
	Encryption []EncryptionKey
}

// ConfiguredKubernetesKeys reads the Kubernetes keys of a control plane's
// config of the v1.14 contract (KubeServiceAccountConfig,
// KubeEtcdEncryptionConfig): what kube-apiserver runs with once it serves
// that config.
func ConfiguredKubernetesKeys(data []byte) (*KubernetesKeys, error) {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("the node's config: %w", err)
	}
	out := &KubernetesKeys{}
	for _, doc := range cfg.Documents() {
		switch d := doc.(type) {
		case *k8s.KubeServiceAccountConfigV1Alpha1:
			out.Issuing = []byte(d.ServiceIssuer.PrivateKey)
			for _, k := range d.ServiceAccepted.PublicKeys {
				out.Accepted = append(out.Accepted, []byte(k))
			}
		case *k8s.KubeEtcdEncryptionConfigV1Alpha1:
			resources, _ := d.Config.Object["resources"].([]any)
			for _, r := range resources {
				r, _ := r.(map[string]any)
				providers, _ := r["providers"].([]any)
				for _, p := range providers {
					box, ok := p.(map[string]any)["secretbox"].(map[string]any)
					if !ok || out.Encryption != nil {
						continue
					}
					keys, _ := box["keys"].([]any)
					for _, k := range keys {
						k, _ := k.(map[string]any)
						name, _ := k["name"].(string)
						secret, _ := k["secret"].(string)
						out.Encryption = append(out.Encryption, EncryptionKey{Name: name, Secret: secret})
					}
				}
			}
		}
	}
	if out.Issuing == nil {
		return nil, errors.New("the node's config has no KubeServiceAccountConfig: it is not a control plane of the v1.14 contract")
	}
	return out, nil
}

// KubernetesKeysRotate reports whether control planes of the contract of
// Talos version take several service-account and secretbox keys (from the
// v1.14 contract on), and names the contract as Rendered.Contract does.
func KubernetesKeysRotate(version string) (contract string, ok bool, err error) {
	c, err := config.ParseContractFromVersion(version)
	if err != nil {
		return "", false, err
	}
	return contractName(c), multidoc(c), nil
}
