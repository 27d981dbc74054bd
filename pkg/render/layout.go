package render

import (
	"github.com/siderolabs/talos/pkg/machinery/config"

	"ichor.dev/ichor/pkg/talosdocs"
)

// kubeletDocumentContract is the first version contract whose nodes take the
// kubelet's settings from the standalone KubeletConfig document. Talos's own
// generator writes that document from this contract on, and a node refuses a
// config with both it and machine.kubelet.
var kubeletDocumentContract = &config.VersionContract{Major: 1, Minor: 14}

// usesKubeletDocument reports whether contract is kubeletDocumentContract or later.
func usesKubeletDocument(contract *config.VersionContract) bool {
	return !kubeletDocumentContract.Greater(contract)
}

// finish lays the config out the way a node of the contract expects and
// validates it with machinery. Generation and patches always work on the
// v1alpha1 layout machinery v1.13 knows, so a patch to machine.kubelet means
// the same thing at every contract; only the final config is laid out.
func finish(cfg config.Provider, contract *config.VersionContract) (config.Provider, []string, error) {
	if usesKubeletDocument(contract) {
		var err error
		if cfg, err = talosdocs.MoveKubeletToDocument(cfg); err != nil {
			return nil, nil, err
		}
	}
	warnings, err := validate(cfg)
	if err != nil {
		return nil, nil, err
	}
	return cfg, warnings, nil
}
