package render

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// v1alpha1Key is the document key of the v1alpha1 document, which has no kind.
const v1alpha1Key = "v1alpha1"

// Change is one changed field between two rendered configs and what applying
// it takes. It carries no values: the configs hold the bundle's secrets, and
// changes end up in statuses and Events.
type Change struct {
	// Path is the field: "machine.kubelet.extraArgs" for the v1alpha1 document,
	// "HostnameConfig:hostname" (kind, optional /name, colon, field) for the others.
	Path string
	// Effect is what applying this change takes.
	Effect ichorv1alpha1.ConfigEffect
}

// Classify compares two rendered configs and returns the strongest effect of
// the change on a node that applies as model says, with every changed field
// and its effect, sorted by path. Equal configs give None. Lists are
// compared whole, so a changed list is one change. A nil or empty old
// config means a first apply, which needs a reboot-like install; Classify
// refuses it rather than guess.
func Classify(old, new []byte, model ApplyModel) (ichorv1alpha1.ConfigEffect, []Change, error) {
	if len(old) == 0 || len(new) == 0 {
		return "", nil, errors.New("classify: both configs are needed; a first apply has no effect class")
	}
	oldDocs, err := documents(old)
	if err != nil {
		return "", nil, fmt.Errorf("classify: old config: %w", err)
	}
	newDocs, err := documents(new)
	if err != nil {
		return "", nil, fmt.Errorf("classify: new config: %w", err)
	}
	if paths := encryptionSwitches(oldDocs, newDocs); len(paths) > 0 {
		return "", nil, &ResetRequiredError{Paths: paths}
	}
	worker := machineType(oldDocs) == "worker" && machineType(newDocs) == "worker"

	var changes []Change
	for _, key := range unionKeys(oldDocs, newDocs) {
		for _, path := range diff(oldDocs[key].body, newDocs[key].body, nil) {
			c := Change{}
			var kind string
			if key == v1alpha1Key {
				c.Path = strings.Join(path, ".")
				c.Effect = v1alpha1Effect(path, worker)
			} else {
				kind = cmp.Or(oldDocs[key].kind, newDocs[key].kind)
				c.Path = key + ":" + strings.Join(path, ".")
				c.Effect = documentEffect(kind)
			}
			if model == ApplyLive {
				c.Effect = liveEffect(path, kind, c.Effect)
			}
			changes = append(changes, c)
		}
	}
	slices.SortFunc(changes, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })

	effects := make([]ichorv1alpha1.ConfigEffect, len(changes))
	for i, c := range changes {
		effects[i] = c.Effect
	}
	return Strongest(effects...), changes, nil
}

// systemVolumes are the volumes whose encryption Talos sets when it
// formats them at install.
var systemVolumes = []string{"STATE", "EPHEMERAL"}

// encryptionSwitches are the places where new turns the encryption of a
// system volume on, off, or to another provider, against old, or keeps no
// key of old's: in its VolumeConfig document, or in the deprecated
// machine.systemDiskEncryption. Talos opens an encrypted volume at boot
// with a configured key that its LUKS2 header holds, and only then syncs
// the other slots with the config; a config that keeps none of the keys
// the volume was made with (a tpm key replaced by a nodeID one, say) would
// leave the node unable to open it. A key rotation keeps one: it adds a
// slot, then drops the old one.
//
// A volume's encryption is one value whichever place sets it (Talos refuses
// a config that sets it in both), so moving it from one place to the other
// changes nothing.
func encryptionSwitches(oldDocs, newDocs map[string]document) []string {
	var paths []string
	for _, volume := range systemVolumes {
		before, where, oldKeys := volumeEncryption(oldDocs, volume)
		after, whereNew, newKeys := volumeEncryption(newDocs, volume)
		keysKept := len(oldKeys) == 0 || len(newKeys) == 0 || slices.ContainsFunc(newKeys, func(k string) bool { return slices.Contains(oldKeys, k) })
		if before != after || !keysKept {
			paths = append(paths, cmp.Or(whereNew, where))
		}
	}
	return paths
}

// volumeEncryption is the provider that encrypts volume in docs ("" for
// none), the field that says so, and its keys as "slot:kind" (0:tpm).
func volumeEncryption(docs map[string]document, volume string) (provider, path string, keys []string) {
	key := "VolumeConfig/" + volume
	if section, _ := docs[key].body["encryption"].(map[string]any); len(section) > 0 {
		provider, _ = section["provider"].(string)
		return provider, key + ":encryption", encryptionKeys(section)
	}
	m, _ := docs[v1alpha1Key].body["machine"].(map[string]any)
	sde, _ := m["systemDiskEncryption"].(map[string]any)
	if section, _ := sde[strings.ToLower(volume)].(map[string]any); len(section) > 0 {
		provider, _ = section["provider"].(string)
		return cmp.Or(provider, "luks2"), "machine.systemDiskEncryption." + strings.ToLower(volume), encryptionKeys(section)
	}
	return "", "", nil
}

// encryptionKeys are the keys of an encryption section as "slot:kind".
func encryptionKeys(section map[string]any) []string {
	list, _ := section["keys"].([]any)
	var out []string
	for _, item := range list {
		k, _ := item.(map[string]any)
		for _, kind := range []string{"static", "nodeID", "kms", "tpm"} {
			if _, ok := k[kind]; ok {
				out = append(out, fmt.Sprintf("%v:%s", k["slot"], kind))
			}
		}
	}
	return out
}

// document is one YAML document of a config, decoded generically.
type document struct {
	kind string
	body map[string]any
}

// documents splits a config into its documents, keyed by kind and name, the
// identity machinery's patcher uses; the v1alpha1 document is keyed "v1alpha1".
func documents(data []byte) (map[string]document, error) {
	out := map[string]document{}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	for i := 0; ; i++ {
		var body map[string]any
		err := dec.Decode(&body)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if body == nil {
			continue
		}
		kind, _ := body["kind"].(string)
		key := v1alpha1Key
		if kind != "" {
			key = kind
			if name, ok := body["name"].(string); ok && name != "" {
				key += "/" + name
			}
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("document %s appears twice", key)
		}
		out[key] = document{kind: kind, body: body}
	}
}

// machineType is machine.type of the v1alpha1 document, "" when absent.
func machineType(docs map[string]document) string {
	m, _ := docs[v1alpha1Key].body["machine"].(map[string]any)
	t, _ := m["type"].(string)
	return t
}

// diff returns the paths where a and b differ. Mappings are descended into
// (a missing one counts as empty) so each changed field is reported on its
// own; anything else is compared whole.
func diff(a, b any, path []string) [][]string {
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if (aIsMap || a == nil) && (bIsMap || b == nil) && (aIsMap || bIsMap) {
		var out [][]string
		for _, key := range unionKeys(am, bm) {
			out = append(out, diff(am[key], bm[key], append(slices.Clone(path), key))...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return [][]string{path}
}

// unionKeys returns the keys of both maps, sorted, for a deterministic walk.
func unionKeys[V any](a, b map[string]V) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
