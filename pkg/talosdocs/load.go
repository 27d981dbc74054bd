package talosdocs

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/siderolabs/talos/pkg/machinery/config"
	configconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"go.yaml.in/yaml/v4"
)

// Load parses a machine config like configloader.NewFromBytes, and also
// accepts the documents of this package. A config without them loads exactly
// as configloader loads it.
func Load(data []byte) (config.Provider, error) {
	rest, ours, err := split(data)
	if err != nil {
		return nil, err
	}
	if len(ours) == 0 {
		return configloader.NewFromBytes(data)
	}

	var docs []configconfig.Document
	if len(bytes.TrimSpace(rest)) > 0 {
		loaded, err := configloader.NewFromBytes(rest)
		if err != nil {
			return nil, err
		}
		docs = loaded.Documents()
	}
	return container.New(append(docs, ours...)...)
}

// split separates the documents of this package from the ones machinery
// decodes, which it re-encodes unchanged in meaning.
func split(data []byte) (rest []byte, ours []configconfig.Document, err error) {
	var out bytes.Buffer
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return out.Bytes(), ours, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i, err)
		}
		raw, err := yaml.Marshal(&node)
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i, err)
		}
		switch kindOf(&node) {
		case KubeletConfigKind:
			doc, err := decodeKubeletConfig(raw)
			if err != nil {
				return nil, nil, fmt.Errorf("document %d (%s): %w", i, KubeletConfigKind, err)
			}
			ours = append(ours, doc)
		default:
			if out.Len() > 0 {
				out.WriteString("---\n")
			}
			out.Write(raw)
		}
	}
}

// kindOf returns the kind field of a YAML document, "" when it has none.
func kindOf(doc *yaml.Node) string {
	m := doc
	if m.Kind == yaml.DocumentNode && len(m.Content) == 1 {
		m = m.Content[0]
	}
	if m.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "kind" {
			return m.Content[i+1].Value
		}
	}
	return ""
}

// decodeKubeletConfig decodes a KubeletConfig document strictly, as Talos
// does: an unknown field or API version is an error.
func decodeKubeletConfig(raw []byte) (*KubeletConfigV1Alpha1, error) {
	doc := &KubeletConfigV1Alpha1{}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(doc); err != nil {
		return nil, err
	}
	if doc.MetaAPIVersion != "v1alpha1" {
		return nil, fmt.Errorf("unknown apiVersion %q (want v1alpha1)", doc.MetaAPIVersion)
	}
	return doc, nil
}
