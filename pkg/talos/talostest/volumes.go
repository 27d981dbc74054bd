package talostest

import (
	"context"
	"fmt"
	"slices"

	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
)

// configuredKeySlots are the key slots n's config names for STATE, in
// order; nil when it does not encrypt it.
func (n *Node) configuredKeySlots() []int {
	slots, err := render.ConfiguredDiskKeySlots(n.Config)
	if err != nil {
		return nil
	}
	return slots["STATE"]
}

// prepareVolumes opens (or, new, formats) the node's encrypted volumes at
// a boot and syncs their key slots; false when no configured slot opens
// them.
func (n *Node) prepareVolumes() bool {
	configured := n.configuredKeySlots()
	n.OpenedWith, n.VolumeError, n.failedSyncs = nil, "", nil
	if configured == nil {
		return true
	}
	if n.KeySlots == nil {
		n.KeySlots = slices.Clone(configured)
	}
	for _, slot := range configured {
		if slices.Contains(n.KeySlots, slot) {
			n.OpenedWith = &slot
			break
		}
	}
	if n.OpenedWith == nil {
		n.VolumeError = fmt.Sprintf("no handlers available to get encryption keys from: slots %v hold none of %v", n.KeySlots, configured)
		return false
	}
	if n.FailKeySync != "" {
		n.failedSyncs = []string{n.FailKeySync}
		return true
	}
	n.KeySlots = slices.Clone(configured)
	return true
}

// Volume reports STATE and EPHEMERAL as the last boot prepared them.
func (s *session) Volume(_ context.Context, id string) (*talos.Volume, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	if (id != "STATE" && id != "EPHEMERAL") || !s.n.Installed {
		return nil, fmt.Errorf("volume %s: %w", id, talos.ErrNoVolume)
	}
	v := &talos.Volume{Phase: "ready"}
	switch {
	case s.n.VolumeError != "":
		v.Phase, v.Error, v.Encrypted = "failed", s.n.VolumeError, true
	case s.n.OpenedWith != nil:
		slot := *s.n.OpenedWith
		v.Encrypted, v.OpenedWithSlot, v.FailedSyncs = true, &slot, slices.Clone(s.n.failedSyncs)
	}
	return v, nil
}
