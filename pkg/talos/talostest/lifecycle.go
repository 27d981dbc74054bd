package talostest

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"ichor.dev/ichor/pkg/schematic"
	"ichor.dev/ichor/pkg/talos"
)

func (s *session) ApplyConfiguration(_ context.Context, config []byte, mode talos.ApplyMode) (*talos.ApplyResult, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return nil, err
	}
	if s.maintenance {
		s.n.Calls = append(s.n.Calls, "maintenance-apply")
		s.n.Installed, s.n.Config, s.n.Stage = true, config, "installing"
		return &talos.ApplyResult{Rebooting: true, Details: "installing"}, nil
	}
	s.n.Calls = append(s.n.Calls, "apply "+mode.String())
	if mode == talos.ApplyReboot {
		// As on Talos, the config runs from the next boot on.
		s.n.next, s.n.Stage = config, "rebooting"
		return &talos.ApplyResult{Rebooting: true, Details: "rebooting"}, nil
	}
	s.n.Config = config
	return &talos.ApplyResult{Details: "applied"}, nil
}

func (s *session) Reset(_ context.Context, r talos.ResetRequest) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	if err := s.callLost(true); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, fmt.Sprintf("reset graceful=%v", r.Graceful))
	s.n.Stage = "resetting"
	return s.callLost(false)
}

// callLost is the error of a reboot or reset call that meets Unanswered:
// asked before the node acts (before), it fails a call the node never got;
// after, one whose answer was lost (AnswerLost).
func (s *session) callLost(before bool) error {
	if s.n.Unanswered == 0 || before == s.n.AnswerLost {
		return nil
	}
	s.n.Unanswered--
	return status.Errorf(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: EOF\" (%s)", s.address)
}

// Boot makes every installing or rebooting node run its config, and every
// resetting one come back in maintenance mode.
func (d *Dialer) Boot() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.Nodes {
		switch n.Stage {
		case "installing", "rebooting":
			if n.NeverBoots {
				continue
			}
			n.Boots++
			if n.next != nil {
				n.Config, n.next = n.next, nil
			}
			if n.Staged != "" {
				n.TalosVersion, n.Staged = n.Staged, ""
				n.Schematic, n.stagedSchematic = n.stagedSchematic, ""
			}
			n.Stage = "running"
			if !n.prepareVolumes() {
				n.Stage = "booting"
			}
		case "resetting":
			n.Stage, n.Installed, n.Config, n.next, n.Etcd = "maintenance", false, nil, nil, false
			n.KeySlots, n.OpenedWith, n.VolumeError, n.failedSyncs = nil, nil, "", nil
		case "shutting down":
			if n.drainLeft--; n.drainLeft <= 0 {
				n.Stage = "off"
			}
		}
	}
}

func (s *session) BootID(context.Context) (string, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s-boot-%d", s.n.UUID, s.n.Boots), nil
}

// Reboot starts a reboot that Boot finishes; a node in another sequence
// (not running) drops the request, as Talos's sequencer does.
func (s *session) Reboot(_ context.Context, force bool) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	if err := s.callLost(true); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, fmt.Sprintf("reboot force=%v", force))
	if s.n.Stage == "running" {
		s.n.Stage = "rebooting"
	}
	return s.callLost(false)
}

// Shutdown powers the node off (stage off): at once when forced or without
// DrainPolls, otherwise after draining for DrainPolls Boot calls. Like
// Talos's, it takes over whatever runs, a draining shutdown too.
func (s *session) Shutdown(_ context.Context, force bool) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, fmt.Sprintf("shutdown force=%v", force))
	if force || s.n.DrainPolls == 0 {
		s.n.Stage = "off"
		return nil
	}
	s.n.Stage, s.n.drainLeft = "shutting down", s.n.DrainPolls
	return nil
}

func (s *session) PullImage(_ context.Context, ref string) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, "pull "+ref)
	return nil
}

// Upgrade stages the version of the image's tag for the next boot.
func (s *session) Upgrade(_ context.Context, image string) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.refused(); err != nil {
		return err
	}
	s.n.Calls = append(s.n.Calls, "upgrade "+image)
	if s.n.RefuseUpgrade != "" {
		return &talos.InstallerError{ExitCode: 1, Output: []string{s.n.RefuseUpgrade}}
	}
	s.n.Staged = image[strings.LastIndexByte(image, ':')+1:]
	s.n.stagedSchematic = ""
	if _, id, _, _, err := schematic.ParseInstaller(image, ""); err == nil {
		s.n.stagedSchematic = id
	}
	return nil
}
