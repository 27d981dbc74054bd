package talosdocs

import (
	_ "embed"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	talosv1alpha1 "github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// kubeletConfigYAML is the document as Talos v1.14 encodes it, fields in its order.
//
//go:embed testdata/kubeletconfig.yaml
var kubeletConfigYAML string

func exampleKubeletConfig() *KubeletConfigV1Alpha1 {
	doc := NewKubeletConfigV1Alpha1()
	doc.Image = "siderolabs/kubelet:v1.36.0"
	doc.Config = talosv1alpha1.Unstructured{Object: map[string]any{"serverTLSBootstrap": true}}
	doc.ExtraArgs = talosv1alpha1.Args{"feature-gates": talosv1alpha1.NewArgValue("AllBeta=true", nil)}
	doc.ClusterDNS = []string{"10.96.0.10"}
	enabled := true
	doc.DefaultRuntimeSeccompProfileEnabled = &enabled
	return doc
}

func TestKubeletConfigEncodesAsTalosDoes(t *testing.T) {
	got, err := encoder.NewEncoder(exampleKubeletConfig(), encoder.WithComments(encoder.CommentsDisabled)).Encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != kubeletConfigYAML {
		t.Fatalf("encoded\n%s\nwant\n%s", got, kubeletConfigYAML)
	}

	minimal := NewKubeletConfigV1Alpha1()
	minimal.Image = "siderolabs/kubelet:v1.36.0"
	got, err = encoder.NewEncoder(minimal, encoder.WithComments(encoder.CommentsDisabled)).Encode()
	if err != nil {
		t.Fatal(err)
	}
	if want := "apiVersion: v1alpha1\nkind: KubeletConfig\nimage: siderolabs/kubelet:v1.36.0\n"; string(got) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", got, want)
	}
}

func TestKubeletConfigValidate(t *testing.T) {
	if _, err := exampleKubeletConfig().Validate(nil); err != nil {
		t.Fatalf("valid document refused: %v", err)
	}

	noImage := exampleKubeletConfig()
	noImage.Image = ""
	if _, err := noImage.Validate(nil); err == nil || !strings.Contains(err.Error(), "kubelet image cannot be empty") {
		t.Errorf("no image: got %v", err)
	}

	protected := exampleKubeletConfig()
	protected.Config.Object["authentication"] = map[string]any{}
	if _, err := protected.Validate(nil); err == nil || !strings.Contains(err.Error(), `"authentication" can't be overridden`) {
		t.Errorf("protected field: got %v", err)
	}
}

func TestKubeletConfigCloneIsDeep(t *testing.T) {
	doc := exampleKubeletConfig()
	clone := doc.Clone().(*KubeletConfigV1Alpha1)
	clone.Config.Object["serverTLSBootstrap"] = false
	clone.ClusterDNS[0] = "10.0.0.1"
	*clone.DefaultRuntimeSeccompProfileEnabled = false
	delete(clone.ExtraArgs, "feature-gates")

	if doc.Config.Object["serverTLSBootstrap"] != true || doc.ClusterDNS[0] != "10.96.0.10" ||
		!*doc.DefaultRuntimeSeccompProfileEnabled || len(doc.ExtraArgs) != 1 {
		t.Fatalf("changing the clone changed the original: %+v", doc)
	}
}

func TestMoveKubeletToDocument(t *testing.T) {
	cfg, err := Load([]byte(legacy(true) + "    extraConfig:\n      serverTLSBootstrap: true\n    clusterDNS: [10.96.0.10]\n    disableManifestsDirectory: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	moved, err := MoveKubeletToDocument(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RawV1Alpha1().MachineConfig.MachineKubelet == nil {
		t.Fatal("the input config was changed")
	}
	if moved.RawV1Alpha1().MachineConfig.MachineKubelet != nil {
		t.Fatal("machine.kubelet is still set")
	}
	// The minimal config fails other checks; the two layouts must not conflict.
	if _, err := moved.Validate(containerMode{}); err != nil && strings.Contains(err.Error(), "kubelet") {
		t.Fatalf("moved config: %v", err)
	}
	got, err := moved.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}
	want := "---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: siderolabs/kubelet:v1.36.0\nconfig:\n    serverTLSBootstrap: true\nclusterDNS:\n    - 10.96.0.10\n"
	if !strings.HasSuffix(string(got), want) {
		t.Fatalf("moved config\n%s\ndoes not end in\n%s", got, want)
	}

	for field, snippet := range map[string]string{
		"machine.kubelet.nodeIP":                    "    nodeIP:\n      validSubnets: [10.0.0.0/8]\n",
		"machine.kubelet.extraMounts":               "    extraMounts:\n      - {destination: /x, type: bind, source: /x, options: [bind]}\n",
		"machine.kubelet.registerWithFQDN":          "    registerWithFQDN: true\n",
		"machine.kubelet.disableManifestsDirectory": "    disableManifestsDirectory: false\n",
	} {
		cfg, err := Load([]byte(legacy(true) + snippet))
		if err != nil {
			t.Fatalf("%s: %v", field, err)
		}
		if _, err := MoveKubeletToDocument(cfg); err == nil || !strings.Contains(err.Error(), "no place for "+field) {
			t.Errorf("%s: got %v", field, err)
		}
	}
}
