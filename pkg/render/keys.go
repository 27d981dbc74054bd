package render

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config"
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
