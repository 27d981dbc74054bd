package render

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"go.yaml.in/yaml/v4"
)

// SecretFields are the v1alpha1 config fields that come from the cluster's
// secrets bundle. A patch must not set, remove or copy any of them: they are
// rotated by Ichor's own operations, and a patch is stored in the clear.
var SecretFields = []string{
	"machine.ca",
	"machine.token",
	"machine.acceptedCAs",
	"cluster.id",
	"cluster.secret",
	"cluster.token",
	"cluster.ca",
	"cluster.acceptedCAs",
	"cluster.aggregatorCA",
	"cluster.serviceAccount",
	"cluster.secretboxEncryptionSecret",
	"cluster.aescbcEncryptionSecret",
	"cluster.etcd.ca",
}

// patchDirective is the strategic-merge key that deletes or replaces a section.
const patchDirective = "$patch"

// TouchedSecrets returns the secret fields (see SecretFields) a patch would
// set, delete, replace or copy, sorted; empty means the patch leaves the
// bundle's secrets alone. It reads the patch the way configpatcher does, so it
// sees both strategic-merge and JSON6902 forms. Touching an ancestor counts:
// replacing /cluster/etcd or deleting machine with $patch changes machine.ca.
// A patch that cannot be read is an error, not a pass.
func TouchedSecrets(patch string) ([]string, error) {
	loaded, err := configpatcher.LoadPatch([]byte(patch))
	if err != nil {
		return nil, fmt.Errorf("read patch: %w", err)
	}
	var touched []string
	switch p := loaded.(type) {
	case jsonpatch.Patch:
		touched, err = touchedByJSON6902(p)
	case configpatcher.StrategicMergePatch:
		touched, err = touchedByStrategicMerge(patch)
	default:
		err = fmt.Errorf("unsupported patch type %T", loaded)
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(touched)
	return slices.Compact(touched), nil
}

// touchedByJSON6902 checks every operation's path, and the source of move and
// copy (a copy from a secret would put it where the patch author can read it).
func touchedByJSON6902(p jsonpatch.Patch) ([]string, error) {
	var touched []string
	for i, op := range p {
		paths := []string{}
		path, err := op.Path()
		if err != nil {
			return nil, fmt.Errorf("operation %d: %w", i, err)
		}
		paths = append(paths, path)
		if kind := op.Kind(); kind == "move" || kind == "copy" {
			from, err := op.From()
			if err != nil {
				return nil, fmt.Errorf("operation %d: %w", i, err)
			}
			paths = append(paths, from)
		}
		for _, ptr := range paths {
			touched = append(touched, secretsUnder(pointerFields(ptr))...)
		}
	}
	return touched, nil
}

// pointerFields splits a JSON pointer into unescaped field names.
func pointerFields(ptr string) []string {
	if ptr == "" || ptr == "/" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	for i, part := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
	}
	return parts
}

// secretsUnder returns the secret fields a change at path affects: the field
// itself or anything inside it, and every secret below it.
func secretsUnder(path []string) []string {
	var out []string
	for _, field := range SecretFields {
		secret := strings.Split(field, ".")
		n := min(len(path), len(secret))
		if slices.Equal(path[:n], secret[:n]) {
			out = append(out, field)
		}
	}
	return out
}

// touchedByStrategicMerge walks each v1alpha1 YAML document of the patch. Decoding into
// maps resolves anchors, aliases and merge keys, so they cannot hide a field.
func touchedByStrategicMerge(patch string) ([]string, error) {
	dec := yaml.NewDecoder(strings.NewReader(patch))
	var touched []string
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read strategic-merge patch: %w", err)
		}
		if kind, _ := doc["kind"].(string); kind != "" {
			// Only the v1alpha1 document, which has no kind, holds the bundle's secrets.
			continue
		}
		touched = append(touched, touchedInMap(doc, nil)...)
	}
	return touched, nil
}

// touchedInMap reports the secrets a strategic-merge mapping at prefix
// touches: a secret key present with any value (null included), a $patch
// directive on an ancestor of a secret, or an ancestor set to something other
// than a mapping (which would replace the whole section).
func touchedInMap(m map[string]any, prefix []string) []string {
	var touched []string
	if _, ok := m[patchDirective]; ok {
		touched = append(touched, secretsUnder(prefix)...)
	}
	for key, value := range m {
		path := append(slices.Clone(prefix), key)
		below := secretsUnder(path)
		if len(below) == 0 {
			continue
		}
		if slices.Contains(SecretFields, strings.Join(path, ".")) {
			touched = append(touched, strings.Join(path, "."))
			continue
		}
		child, isMap := value.(map[string]any)
		if !isMap {
			touched = append(touched, below...)
			continue
		}
		touched = append(touched, touchedInMap(child, path)...)
	}
	return touched
}
