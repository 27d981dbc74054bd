package talossim

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"go.yaml.in/yaml/v4"
)

// kube-apiserver's keys follow the control plane's config as Talos renders
// them into its secrets directory: service-account.key, the issuing key,
// signs service-account tokens, and
// service-account.pub, every key tokens are accepted from (the issuing
// one, then KubeServiceAccountConfig's accepted public keys from v1.14);
// encryptionconfig.yaml encrypts Secrets at rest: KubeEtcdEncryptionConfig's
// configuration from v1.14, else the one Talos builds from the cluster's
// secretbox (key2) and aescbc (key1) secrets, with identity last to read
// what was written before. From v1.14, KubeAuthenticationConfig becomes
// authentication-config.yaml (--authentication-config, which Talos keeps to
// itself), whose JWT authenticators replace the --oidc-* flags. A change of
// any of them restarts kube-apiserver, as Talos replaces its static pod.

// The files, in the run's directory.
const (
	serviceAccountKeyFile = "service-account.key"
	serviceAccountPubFile = "service-account.pub"
	encryptionConfigFile  = "encryptionconfig.yaml"
	authenticationFile    = "authentication-config.yaml"
)

// apiServerKeys are the keys of a control plane's config.
type apiServerKeys struct {
	signing, accepted, encryption []byte
	// authentication is the structured authentication configuration; nil
	// when the config has none (v1.13's --oidc-* flags).
	authentication []byte
}

// apiServerKeysOf reads the keys from cfg.
func apiServerKeysOf(cfg talosconfig.Config) (apiServerKeys, error) {
	var k apiServerKeys

	sa := cfg.K8sServiceAccountConfig()
	if sa == nil || sa.IssuingKey() == nil || len(sa.IssuingKey().Key) == 0 {
		return k, errors.New("machine config has no service account key")
	}

	k.signing = sa.IssuingKey().Key
	// A private key is also its public one; kube-apiserver reads every key of the file.
	k.accepted = append(k.accepted, k.signing...)

	for _, a := range sa.AcceptedKeys() {
		k.accepted = append(k.accepted, a.Key...)
	}

	enc, err := encryptionConfigOf(cfg)
	if err != nil {
		return k, err
	}

	k.encryption = enc

	if api, authn := cfg.K8sAPIServerConfig(), cfg.K8sAuthenticationConfig(); api != nil && api.UseAuthenticationConfig() && authn != nil {
		doc := map[string]any{}
		for key, v := range authn.Configuration() {
			doc[key] = v
		}

		doc["apiVersion"], doc["kind"] = "apiserver.config.k8s.io/v1beta1", "AuthenticationConfiguration"

		if k.authentication, err = yaml.Marshal(doc); err != nil {
			return k, fmt.Errorf("authentication config: %w", err)
		}
	}

	return k, nil
}

// flags are kube-apiserver's flags for the files in dir beyond the run's own.
func (k apiServerKeys) flags(dir string) []string {
	if k.authentication == nil {
		return nil
	}

	return []string{"--authentication-config=" + filepath.Join(dir, authenticationFile)}
}

// encryptionConfigOf is the EncryptionConfiguration Talos gives kube-apiserver.
func encryptionConfigOf(cfg talosconfig.Config) ([]byte, error) {
	var doc map[string]any

	if e := cfg.K8sEtcdEncryptionConfig(); e != nil {
		doc = map[string]any{}
		for k, v := range e.EtcdEncryptionConfig() {
			doc[k] = v
		}
	} else {
		var providers []any

		if c := cfg.Cluster(); c != nil {
			if s := c.SecretboxEncryptionSecret(); s != "" {
				providers = append(providers, map[string]any{"secretbox": map[string]any{"keys": []any{map[string]any{"name": "key2", "secret": s}}}})
			}

			if s := c.AESCBCEncryptionSecret(); s != "" {
				providers = append(providers, map[string]any{"aescbc": map[string]any{"keys": []any{map[string]any{"name": "key1", "secret": s}}}})
			}
		}

		providers = append(providers, map[string]any{"identity": map[string]any{}})
		doc = map[string]any{"resources": []any{map[string]any{"resources": []any{"secrets"}, "providers": providers}}}
	}

	doc["apiVersion"], doc["kind"] = "apiserver.config.k8s.io/v1", "EncryptionConfiguration"

	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encryption config: %w", err)
	}

	return out, nil
}

// digest identifies the keys, for the spec's key, without holding them.
func (k apiServerKeys) digest() string {
	h := sha256.New()
	for _, b := range [][]byte{k.signing, k.accepted, k.encryption, k.authentication} {
		h.Write(b)
		h.Write([]byte{0})
	}

	return hex.EncodeToString(h.Sum(nil))
}

// write writes the keys' files into dir.
func (k apiServerKeys) write(dir string) error {
	for name, data := range map[string][]byte{serviceAccountKeyFile: k.signing, serviceAccountPubFile: k.accepted, encryptionConfigFile: k.encryption,
		authenticationFile: k.authentication} {
		if data == nil {
			continue
		}

		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}

	return nil
}
