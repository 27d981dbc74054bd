package talostest

import (
	"context"
	"fmt"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"ichor.dev/ichor/pkg/talos"
)

func (s *session) Facts(context.Context) (*talos.Facts, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	return &talos.Facts{TalosVersion: "v1.13.0", UUID: s.n.UUID}, nil
}

func (s *session) Status(context.Context) (*talos.Status, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	return &talos.Status{Stage: s.n.Stage, Ready: s.n.Stage == "running", Nodename: "node-" + s.n.UUID}, nil
}

func (s *session) Config(context.Context) ([]byte, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	return slices.Clone(s.n.Config), nil
}

func (s *session) Schematic(context.Context) (string, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return "", err
	}
	return s.n.Schematic, nil
}

func (s *session) Version(context.Context) (string, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return "", err
	}
	if s.n.TalosVersion == "" {
		return "v1.13.0", nil
	}
	return s.n.TalosVersion, nil
}

// BootstrapManifest renders, from the node's config, the kube-proxy
// DaemonSet of a control plane's "10-kube-proxy" manifest (its image is
// cluster.proxy.image); no other manifest.
func (s *session) BootstrapManifest(_ context.Context, id string) ([]*unstructured.Unstructured, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	cfg, err := configloader.NewFromBytes(s.n.Config)
	if err != nil {
		return nil, err
	}
	proxy := cfg.K8sProxyConfig()
	if id != talos.ManifestKubeProxy || cfg.Machine().Type() != machine.TypeControlPlane || proxy == nil || !proxy.Enabled() {
		return nil, nil
	}
	ds := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "DaemonSet",
		"metadata":   map[string]any{"name": "kube-proxy", "namespace": "kube-system"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "kube-proxy", "image": proxy.Image()}},
		}}},
	}}
	return []*unstructured.Unstructured{ds}, nil
}

func (s *session) Security(context.Context) (*talos.Security, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	return &talos.Security{SecureBoot: s.n.SecureBoot, BootedWithUKI: s.n.SecureBoot, ModuleSignatureEnforced: true}, nil
}

func (s *session) APIServerVersions(context.Context) (talos.APIServerVersions, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return talos.APIServerVersions{}, err
	}
	return talos.APIServerVersions{Config: s.n.APIServerConfigVersion, ConfigFiles: s.n.APIServerConfigFilesVersion}, nil
}

// TalosCA reads the trust of the config the node runs, as Talos's OSRoot
// has it: machine.ca issues, and is accepted with machine.acceptedCAs.
func (s *session) TalosCA(context.Context) (*talos.TalosCA, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	cfg, err := configloader.NewFromBytes(s.n.Config)
	if err != nil {
		return nil, fmt.Errorf("the node's config: %w", err)
	}
	sec := cfg.Machine().Security()
	out := &talos.TalosCA{}
	if ca := sec.IssuingCA(); ca != nil {
		out.Accepted = [][]byte{ca.Crt}
		if len(ca.Key) > 0 { // a worker's holds the certificate only, which OSRoot leaves out
			out.Issuing = ca.Crt
		}
	}
	for _, ca := range sec.AcceptedCAs() {
		out.Accepted = append(out.Accepted, ca.Crt)
	}
	return out, nil
}
