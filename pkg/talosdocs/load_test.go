package talosdocs

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
)

// legacy is a minimal v1alpha1 document; with machine.kubelet when withKubelet.
func legacy(withKubelet bool) string {
	s := "version: v1alpha1\nmachine:\n  type: worker\n"
	if withKubelet {
		s += "  kubelet:\n    image: siderolabs/kubelet:v1.36.0\n"
	}
	return s
}

func TestLoadCarriesKubeletConfig(t *testing.T) {
	cfg, err := Load([]byte(legacy(false) + "---\n" + kubeletConfigYAML))
	if err != nil {
		t.Fatal(err)
	}
	k := KubeletOf(cfg)
	if k.Image != "siderolabs/kubelet:v1.36.0" || k.ExtraConfig["serverTLSBootstrap"] != true {
		t.Fatalf("KubeletOf = %+v", k)
	}
	if cfg.Machine() == nil || cfg.Machine().Type().String() != "worker" {
		t.Fatal("the v1alpha1 document was lost")
	}

	// Encoding the loaded config and loading it again gives the same bytes.
	first, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}
	again, err := Load(first)
	if err != nil {
		t.Fatal(err)
	}
	second, err := again.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != string(second) || !strings.Contains(string(first), kubeletConfigYAML) {
		t.Fatalf("round trip changed the config:\n%s\n---- then\n%s", first, second)
	}
}

func TestLoadWithoutOurDocumentsIsConfigloader(t *testing.T) {
	cfg, err := Load([]byte(legacy(true)))
	if err != nil {
		t.Fatal(err)
	}
	if got := KubeletOf(cfg).Image; got != "siderolabs/kubelet:v1.36.0" {
		t.Fatalf("KubeletOf(machine.kubelet).Image = %q", got)
	}
	if !cfg.Readonly() {
		t.Error("a config with only machinery's documents should load as configloader loads it (read-only, bytes kept)")
	}
}

func TestLoadRefuses(t *testing.T) {
	cases := map[string]struct {
		config string
		want   string
	}{
		"unknown field": {
			config: legacy(false) + "---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: k:v1\nnodeIP: {}\n",
			want:   "field nodeIP not found",
		},
		"unknown API version": {
			config: legacy(false) + "---\napiVersion: v1beta1\nkind: KubeletConfig\nimage: k:v1\n",
			want:   `unknown apiVersion "v1beta1"`,
		},
		"twice": {
			config: legacy(false) + "---\n" + kubeletConfigYAML + "---\n" + kubeletConfigYAML,
			want:   "duplicate document: KubeletConfig/",
		},
		"broken machinery document": {
			config: "version: v1alpha1\nmachine:\n  typo: 1\n---\n" + kubeletConfigYAML,
			want:   "unknown keys found during decoding",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Load([]byte(tc.config))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestBothKubeletLayoutsConflict checks the rule a Talos v1.14 node applies:
// the kubelet is configured by machine.kubelet or by KubeletConfig, never both.
func TestBothKubeletLayoutsConflict(t *testing.T) {
	cfg, err := Load([]byte(legacy(true) + "---\n" + kubeletConfigYAML))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cfg.Validate(containerMode{})
	if err == nil || !strings.Contains(err.Error(), "kubelet config is already set in v1alpha1 config (.machine.kubelet)") {
		t.Fatalf("Validate = %v, want the conflict", err)
	}
}

// containerMode is a validation mode that needs no install section.
type containerMode struct{}

func (containerMode) String() string        { return "container" }
func (containerMode) RequiresInstall() bool { return false }
func (containerMode) InContainer() bool     { return true }
