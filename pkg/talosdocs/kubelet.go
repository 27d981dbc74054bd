package talosdocs

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	talosv1alpha1 "github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/siderolabs/talos/pkg/machinery/kubelet"
)

// KubeletConfigKind is the kind of Talos v1.14's standalone kubelet document.
const KubeletConfigKind = "KubeletConfig"

// KubeletConfigV1Alpha1 is the KubeletConfig document of Talos v1.14 and
// later, which replaces the v1alpha1 machine.kubelet section: a node refuses a
// config that carries both. Config is the kubelet's own configuration file
// (KubeletConfiguration, without kind and apiVersion), where
// serverTLSBootstrap lives from v1.14 on.
type KubeletConfigV1Alpha1 struct {
	meta.Meta `yaml:",inline"`

	// Image is the kubelet container image, with its tag.
	Image string `yaml:"image"`
	// Config overrides fields of the kubelet configuration file.
	Config talosv1alpha1.Unstructured `yaml:"config,omitempty"`
	// ExtraArgs are extra kubelet flags.
	ExtraArgs talosv1alpha1.Args `yaml:"extraArgs,omitempty"`
	// ClusterDNS overrides the kubelet's cluster DNS addresses.
	ClusterDNS []string `yaml:"clusterDNS,omitempty"`
	// DefaultRuntimeSeccompProfileEnabled turns on the runtime's default seccomp profile.
	DefaultRuntimeSeccompProfileEnabled *bool `yaml:"defaultRuntimeSeccompProfileEnabled,omitempty"`
}

// NewKubeletConfigV1Alpha1 returns an empty KubeletConfig document.
func NewKubeletConfigV1Alpha1() *KubeletConfigV1Alpha1 {
	return &KubeletConfigV1Alpha1{Meta: meta.Meta{MetaAPIVersion: "v1alpha1", MetaKind: KubeletConfigKind}}
}

var (
	_ config.Document                     = &KubeletConfigV1Alpha1{}
	_ config.Validator                    = &KubeletConfigV1Alpha1{}
	_ container.V1Alpha1ConflictValidator = &KubeletConfigV1Alpha1{}
)

// Clone implements config.Document.
func (k *KubeletConfigV1Alpha1) Clone() config.Document {
	out := *k
	out.Config = *k.Config.DeepCopy()
	out.ExtraArgs = maps.Clone(k.ExtraArgs) // ArgValue is immutable once built; machinery copies it by value too
	out.ClusterDNS = append([]string(nil), k.ClusterDNS...)
	if k.DefaultRuntimeSeccompProfileEnabled != nil {
		v := *k.DefaultRuntimeSeccompProfileEnabled
		out.DefaultRuntimeSeccompProfileEnabled = &v
	}
	return &out
}

// Validate implements config.Validator with the rules Talos v1.14 applies:
// an image is required, and the kubelet fields Talos owns cannot be overridden.
func (k *KubeletConfigV1Alpha1) Validate(validation.RuntimeMode, ...validation.Option) ([]string, error) {
	var errs error
	if k.Image == "" {
		errs = errors.Join(errs, errors.New("kubelet image cannot be empty"))
	}
	for _, field := range kubelet.ProtectedConfigurationFields {
		if _, ok := k.Config.Object[field]; ok {
			errs = errors.Join(errs, fmt.Errorf("kubelet configuration field %q can't be overridden", field))
		}
	}
	return nil, errs
}

// V1Alpha1ConflictValidate implements container.V1Alpha1ConflictValidator:
// the kubelet is configured in one place only.
func (k *KubeletConfigV1Alpha1) V1Alpha1ConflictValidate(c *talosv1alpha1.Config) error {
	if c.MachineConfig != nil && c.MachineConfig.MachineKubelet != nil {
		return errors.New("kubelet config is already set in v1alpha1 config (.machine.kubelet)")
	}
	return nil
}

// Kubelet is where a config configures the kubelet, whichever layout it uses.
type Kubelet struct {
	Image       string
	ExtraConfig map[string]any
}

// KubeletOf reads the kubelet settings of cfg from its KubeletConfig document
// when it has one, from machine.kubelet otherwise.
func KubeletOf(cfg coreconfig.Provider) Kubelet {
	for _, doc := range cfg.Documents() {
		if k, ok := doc.(*KubeletConfigV1Alpha1); ok {
			return Kubelet{Image: k.Image, ExtraConfig: k.Config.Object}
		}
	}
	if cfg.Machine() == nil {
		return Kubelet{}
	}
	return Kubelet{Image: cfg.Machine().Kubelet().Image(), ExtraConfig: cfg.Machine().Kubelet().ExtraConfig()}
}

// MoveKubeletToDocument returns cfg with machine.kubelet moved into a
// KubeletConfig document, the layout of Talos v1.14 and later
// (extraConfig becomes config). machine.kubelet fields that Talos v1.14 keeps
// in other documents are refused by name rather than dropped.
func MoveKubeletToDocument(cfg coreconfig.Provider) (coreconfig.Provider, error) {
	cfg = cfg.Clone()
	v1 := cfg.RawV1Alpha1()
	if v1 == nil || v1.MachineConfig == nil || v1.MachineConfig.MachineKubelet == nil {
		return cfg, nil
	}
	k := v1.MachineConfig.MachineKubelet
	if unsupported := fieldsWithoutKubeletDocument(k); len(unsupported) > 0 {
		return nil, fmt.Errorf("Talos v1.14 and later take the kubelet's settings from the KubeletConfig document, which has no place for %s",
			strings.Join(unsupported, ", "))
	}

	doc := NewKubeletConfigV1Alpha1()
	doc.Image = k.KubeletImage
	doc.Config = k.KubeletExtraConfig
	doc.ExtraArgs = k.KubeletExtraArgs
	doc.ClusterDNS = k.KubeletClusterDNS
	doc.DefaultRuntimeSeccompProfileEnabled = k.KubeletDefaultRuntimeSeccompProfileEnabled
	v1.MachineConfig.MachineKubelet = nil

	out, err := container.New(append(cfg.Documents(), doc)...)
	if err != nil {
		return nil, fmt.Errorf("add %s document: %w", KubeletConfigKind, err)
	}
	return out, nil
}

// fieldsWithoutKubeletDocument lists the set machine.kubelet fields that the
// KubeletConfig document cannot carry. disableManifestsDirectory true is the
// document's fixed behaviour, so only false is refused.
func fieldsWithoutKubeletDocument(k *talosv1alpha1.KubeletConfig) []string {
	var out []string
	if len(k.KubeletExtraMounts) > 0 {
		out = append(out, "machine.kubelet.extraMounts")
	}
	if len(k.KubeletCredentialProviderConfig.Object) > 0 {
		out = append(out, "machine.kubelet.credentialProviderConfig")
	}
	if k.KubeletRegisterWithFQDN != nil {
		out = append(out, "machine.kubelet.registerWithFQDN")
	}
	if k.KubeletNodeIP != nil {
		out = append(out, "machine.kubelet.nodeIP")
	}
	if k.KubeletSkipNodeRegistration != nil {
		out = append(out, "machine.kubelet.skipNodeRegistration")
	}
	if k.KubeletDisableManifestsDirectory != nil && !*k.KubeletDisableManifestsDirectory {
		out = append(out, "machine.kubelet.disableManifestsDirectory: false")
	}
	return out
}
