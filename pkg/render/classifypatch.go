package render

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// ClassifyPatch returns every field a TalosConfigPatch writes, each with its
// class (see PatchClass), sorted by path. It decides on the patch's effect,
// whatever its form (strategic merge, JSON6902, several documents): the
// patch is applied to reference control-plane and worker configs and every
// field that comes out different counts, together with every field the
// patch names even where it writes the value already there (a reference
// config is not the cluster's, so a no-op here may be a change there).
// A patch that cannot be read or applied is an error, never a pass.
func ClassifyPatch(patch string) ([]ClassifiedField, error) {
	named, namedDocs, err := namedPaths(patch)
	if err != nil {
		return nil, err
	}
	refs, err := referenceConfigs()
	if err != nil {
		return nil, fmt.Errorf("reference configs: %w", err)
	}
	v1 := named
	docs := namedDocs
	p := scopedPatch{patch: &ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Name: "classify"}, Spec: ichorv1alpha1.TalosConfigPatchSpec{Patch: patch},
	}}
	for _, ref := range refs {
		out, err := applyPatch(ref.cfg, p)
		if err != nil {
			var pe *PatchError
			if errors.As(err, &pe) {
				return nil, pe.Err
			}
			return nil, err
		}
		data, err := out.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
		if err != nil {
			return nil, fmt.Errorf("encode patched reference config: %w", err)
		}
		after, err := documents(data)
		if err != nil {
			return nil, err
		}
		for _, key := range unionKeys(ref.docs, after) {
			changed := fieldDiff(ref.docs[key].body, after[key].body, nil)
			if len(changed) == 0 {
				continue
			}
			if key == v1alpha1Key {
				v1 = append(v1, changed...)
				continue
			}
			kind := ref.docs[key].kind
			if kind == "" {
				kind = after[key].kind
			}
			docs[kind] = append(docs[kind], changed...)
		}
	}
	return classifyPaths(v1, docs), nil
}

// reference is a generated config a patch is tried on.
type reference struct {
	cfg  config.Provider
	docs map[string]document
}

var (
	referencesOnce sync.Once
	references     []reference
	referencesErr  error
)

// referenceConfigs are a control plane's and a worker's configs of a
// made-up cluster, with a bundle of their own, generated once per process.
func referenceConfigs() ([]reference, error) {
	referencesOnce.Do(func() {
		cluster := &ichorv1alpha1.TalosCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "reference"},
			Spec: ichorv1alpha1.TalosClusterSpec{
				TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
				ControlPlane: ichorv1alpha1.ControlPlaneSpec{Endpoint: "https://127.0.0.1:6443"},
				Network: ichorv1alpha1.ClusterNetwork{
					PodCIDRs: []string{"10.244.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/12"}, DNSDomain: "cluster.local",
				},
			},
		}
		contract, err := config.ParseContractFromVersion(cluster.Spec.TalosVersion)
		if err != nil {
			referencesErr = err
			return
		}
		bundle, err := secrets.NewBundle(secrets.NewClock(), contract)
		if err != nil {
			referencesErr = err
			return
		}
		for _, role := range []ichorv1alpha1.MachineRole{ichorv1alpha1.MachineRoleControlPlane, ichorv1alpha1.MachineRoleWorker} {
			m := &ichorv1alpha1.TalosMachine{
				ObjectMeta: metav1.ObjectMeta{Name: "reference-" + string(role)},
				Spec:       ichorv1alpha1.TalosMachineSpec{ClusterName: "reference", Role: role, Install: ichorv1alpha1.InstallSpec{Disk: "/dev/sda"}},
			}
			cfg, _, err := baseConfig(Input{Cluster: cluster, Machine: m, Secrets: bundle})
			if err != nil {
				referencesErr = err
				return
			}
			data, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
			if err != nil {
				referencesErr = err
				return
			}
			docs, err := documents(data)
			if err != nil {
				referencesErr = err
				return
			}
			references = append(references, reference{cfg: cfg, docs: docs})
		}
	})
	return references, referencesErr
}

// namedPaths returns the v1alpha1 fields a patch names (every leaf it sets,
// every section a $patch directive replaces or deletes, every JSON6902 path
// and source) and the other documents it names, by kind.
func namedPaths(patch string) ([][]string, map[string][][]string, error) {
	loaded, err := configpatcher.LoadPatch([]byte(patch))
	if err != nil {
		return nil, nil, fmt.Errorf("read patch: %w", err)
	}
	docs := map[string][][]string{}
	switch p := loaded.(type) {
	case jsonpatch.Patch:
		var paths [][]string
		for i, op := range p {
			ptrs := []string{}
			path, err := op.Path()
			if err != nil {
				return nil, nil, fmt.Errorf("operation %d: %w", i, err)
			}
			ptrs = append(ptrs, path)
			if kind := op.Kind(); kind == "move" || kind == "copy" {
				from, err := op.From()
				if err != nil {
					return nil, nil, fmt.Errorf("operation %d: %w", i, err)
				}
				ptrs = append(ptrs, from)
			}
			for _, ptr := range ptrs {
				paths = append(paths, pointerFields(ptr))
			}
		}
		return paths, docs, nil
	case configpatcher.StrategicMergePatch:
		var paths [][]string
		dec := yaml.NewDecoder(strings.NewReader(patch))
		for {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, nil, fmt.Errorf("read strategic-merge patch: %w", err)
			}
			if kind, _ := doc["kind"].(string); kind != "" {
				docs[kind] = append(docs[kind], nil)
				continue
			}
			paths = append(paths, leaves(doc, nil)...)
		}
		return paths, docs, nil
	default:
		return nil, nil, fmt.Errorf("unsupported patch type %T", loaded)
	}
}

// leaves returns the path of every non-mapping value below m (the mapping
// at prefix), looking into the items of lists whose items the class table
// tells apart (itemsClassed; an item is the path element "*"), and prefix
// itself when m carries a $patch directive. Decoding into maps
// resolves anchors, aliases and merge keys, so they hide no field; an empty
// mapping merges nothing and names nothing.
func leaves(m map[string]any, prefix []string) [][]string {
	var out [][]string
	if _, ok := m[patchDirective]; ok {
		out = append(out, slices.Clone(prefix))
	}
	for key, value := range m {
		if key == patchDirective {
			continue
		}
		out = append(out, valueLeaves(value, append(slices.Clone(prefix), key))...)
	}
	return out
}

// valueLeaves is leaves for any value at path.
func valueLeaves(value any, path []string) [][]string {
	switch v := value.(type) {
	case map[string]any:
		return leaves(v, path)
	case []any:
		if len(v) == 0 || !itemsClassed(path) {
			return [][]string{path}
		}
		var out [][]string
		for _, item := range v {
			out = append(out, valueLeaves(item, append(slices.Clone(path), "*"))...)
		}
		return out
	default:
		return [][]string{path}
	}
}

// fieldDiff is diff (which compares lists whole, as effects are decided)
// descending into the lists whose items the class table tells apart
// (itemsClassed), item by item at the same index, each item being the path
// element "*": a WireGuard key among machine.network.interfaces is classed
// apart from an interface's addresses. An item moved to another index
// counts as changed in all its fields.
func fieldDiff(a, b any, path []string) [][]string {
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	if (aIsList || a == nil) && (bIsList || b == nil) && (aIsList || bIsList) && itemsClassed(path) {
		var out [][]string
		item := func(l []any, i int) any {
			if i < len(l) {
				return l[i]
			}
			return nil
		}
		for i := range max(len(al), len(bl)) {
			out = append(out, fieldDiff(item(al, i), item(bl, i), append(slices.Clone(path), "*"))...)
		}
		return out
	}
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if (aIsMap || a == nil) && (bIsMap || b == nil) && (aIsMap || bIsMap) {
		var out [][]string
		for _, key := range unionKeys(am, bm) {
			out = append(out, fieldDiff(am[key], bm[key], append(slices.Clone(path), key))...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return [][]string{path}
}
