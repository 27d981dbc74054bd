package render

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	configconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
)

// Two layouts: up to the v1.13 contract, Kubernetes is configured in the
// v1alpha1 document (machine.kubelet, cluster.apiServer, cluster.ca …);
// from v1.14 on, in documents of their own (KubeletConfig,
// KubeAPIServerConfig, KubeAPIServerCAConfig …), which machinery's
// generator writes for that contract, and a node refuses a config that sets
// the same thing in both. Each addition Ichor makes to the generated config
// writes to the place of the cluster's contract.

// multidoc reports whether contract configures Kubernetes in documents.
func multidoc(contract *config.VersionContract) bool {
	return contract.MultidocKubernetesConfigSupported()
}

// editDocument applies edit to a copy of cfg's first document of type T.
// With no such document, create makes one when it is not nil; otherwise it is
// an error naming kind: the generator writes every document Ichor edits.
func editDocument[T configconfig.Document](cfg config.Provider, kind string, create func() T, edit func(T) error) (config.Provider, error) {
	docs := cfg.Documents()
	out := make([]configconfig.Document, 0, len(docs)+1)
	found := false
	for _, d := range docs {
		if t, ok := d.(T); ok && !found {
			c, ok := t.Clone().(T)
			if !ok {
				return nil, fmt.Errorf("%s document: its clone is of another type", kind)
			}
			if err := edit(c); err != nil {
				return nil, err
			}
			d, found = c, true
		}
		out = append(out, d)
	}
	if !found {
		if create == nil {
			return nil, fmt.Errorf("config has no %s document", kind)
		}
		c := create()
		if err := edit(c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return container.New(out...)
}

// withoutDocuments drops cfg's documents of type T.
func withoutDocuments[T configconfig.Document](cfg config.Provider) (config.Provider, error) {
	var out []configconfig.Document
	for _, d := range cfg.Documents() {
		if _, ok := d.(T); !ok {
			out = append(out, d)
		}
	}
	return container.New(out...)
}

// unknownKinds refuses the documents a node of contract does not know: a
// v1.14 kind on an older contract, whose node would refuse the config.
func unknownKinds(cfg config.Provider, contract *config.VersionContract) error {
	if contract.Greater(config.TalosVersion1_13) {
		return nil
	}
	var kinds []string
	for _, d := range cfg.Documents() {
		if _, ok := talos1_14Documents[d.Kind()]; ok {
			kinds = append(kinds, d.Kind())
		}
	}
	if len(kinds) == 0 {
		return nil
	}
	slices.Sort(kinds)
	return fmt.Errorf("the %s document exists from Talos v1.14 on, and this cluster's version contract is %s: write the v1alpha1 field it replaces",
		strings.Join(slices.Compact(kinds), ", "), contract)
}

// layoutConflicts refuses a v1alpha1 field set where the config has the
// document that replaces it (a patch for the v1.13 layout on a v1.14
// contract), naming the documents to patch instead. The generated config
// has none, so the first patch that makes one is at fault.
func layoutConflicts(cfg config.Provider) error {
	v1 := cfg.RawV1Alpha1()
	if v1 == nil {
		return nil
	}
	var errs []error
	var kinds []string
	for _, d := range cfg.Documents() {
		c, ok := d.(container.V1Alpha1ConflictValidator)
		if !ok {
			continue
		}
		if err := c.V1Alpha1ConflictValidate(v1); err != nil {
			errs = append(errs, err)
			kinds = append(kinds, d.Kind())
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w; this version contract configures it in the %s document: patch that instead",
		errors.Join(errs...), strings.Join(slices.Compact(kinds), ", "))
}

// finish validates cfg with machinery as a node would.
func finish(cfg config.Provider) (config.Provider, []string, error) {
	warnings, err := validate(cfg)
	if err != nil {
		return nil, nil, err
	}
	return cfg, warnings, nil
}
