package render

import (
	"errors"
	"fmt"
	"slices"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/siderolabs/talos/pkg/machinery/config"
	cfgconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	talosv1alpha1 "github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// applyPatch applies one TalosConfigPatch to cfg and returns the new config;
// cfg itself is left untouched, so a failure leaves nothing half-applied.
func applyPatch(cfg config.Provider, sp scopedPatch) (config.Provider, error) {
	loaded, err := configpatcher.LoadPatch([]byte(sp.patch.Spec.Patch))
	if err != nil {
		return nil, &PatchError{Patch: nameOf(sp.patch), Reason: PatchParseFailed, Err: err}
	}
	var out config.Provider
	switch p := loaded.(type) {
	case configpatcher.StrategicMergePatch:
		if out, err = configpatcher.StrategicMerge(cfg, p); err == nil {
			out, err = dropUnmatchedDeletes(out)
		}
	case jsonpatch.Patch:
		out, err = applyJSON6902(cfg, p)
	default:
		err = fmt.Errorf("unsupported patch type %T", loaded)
	}
	if err != nil {
		return nil, &PatchError{Patch: nameOf(sp.patch), Reason: PatchApplyFailed, Err: err}
	}
	return out, nil
}

// dropUnmatchedDeletes removes the "$patch: delete" documents that matched
// no document of the config: machinery appends them as they are, and
// encoding one panics. Deleting a document that is not there changes nothing.
func dropUnmatchedDeletes(cfg config.Provider) (config.Provider, error) {
	docs := cfg.Documents()
	kept := slices.DeleteFunc(slices.Clone(docs), func(d cfgconfig.Document) bool {
		_, unmatched := d.(configloader.Selector)
		return unmatched
	})
	if len(kept) == len(docs) {
		return cfg, nil
	}
	return container.New(kept...)
}

// applyJSON6902 applies a JSON6902 patch to the v1alpha1 document and keeps
// the other documents as they are. Machinery's patcher refuses JSON6902 on a
// multi-document config, and every config rendered for Talos 1.12 and later
// has more than one document (HostnameConfig), so without this JSON6902
// patches could never apply.
func applyJSON6902(cfg config.Provider, p jsonpatch.Patch) (config.Provider, error) {
	raw := cfg.RawV1Alpha1()
	if raw == nil {
		return nil, errors.New("a JSON6902 patch needs a v1alpha1 document to patch")
	}
	encoded, err := container.NewV1Alpha1(raw).EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, fmt.Errorf("encode v1alpha1 document: %w", err)
	}
	patched, err := configpatcher.JSON6902(encoded, p)
	if err != nil {
		return nil, err
	}
	loaded, err := configloader.NewFromBytes(patched)
	if err != nil {
		return nil, fmt.Errorf("load patched v1alpha1 document: %w", err)
	}
	newRaw := loaded.RawV1Alpha1()
	if newRaw == nil || len(loaded.Documents()) != 1 {
		return nil, errors.New("a JSON6902 patch must leave exactly the v1alpha1 document")
	}
	docs := []cfgconfig.Document{newRaw}
	for _, doc := range cfg.Documents() {
		if _, isV1Alpha1 := doc.(*talosv1alpha1.Config); !isV1Alpha1 {
			docs = append(docs, doc.Clone())
		}
	}
	return container.New(docs...)
}
