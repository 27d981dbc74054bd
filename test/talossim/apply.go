package talossim

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"ichor.dev/ichor/pkg/talosdocs"
)

// Mode details strings of the ApplyConfiguration response, as Talos words them.
const (
	detailsReboot   = "Applied configuration with a reboot"
	detailsNoReboot = "Applied configuration without a reboot"
	detailsStaged   = "Staged configuration to be applied after the next reboot"
)

// simMode is the validation runtime mode of a bare-metal node: install instructions are required until
// the node has been installed.
type simMode struct{ installed bool }

// String implements validation.RuntimeMode.
func (simMode) String() string { return "metal" }

// RequiresInstall implements validation.RuntimeMode.
func (m simMode) RequiresInstall() bool { return !m.installed }

// InContainer implements validation.RuntimeMode.
func (simMode) InContainer() bool { return false }

// loadNodeConfig parses a config as a node running the given Talos version does:
// the documents later releases added (the KubeletConfig of v1.14) only from
// that release on, so an older node refuses them as unknown, like Talos.
func loadNodeConfig(data []byte, running string) (config.Provider, error) {
	if contract, err := config.ParseContractFromVersion(running); err == nil && !contract.Greater(config.TalosVersion1_13) {
		return configloader.NewFromBytes(data)
	}
	return talosdocs.Load(data)
}

// ApplyConfiguration loads, validates and applies a machine config following machined's handler.
//
//nolint:gocyclo,cyclop
func (s *machineServer) ApplyConfiguration(ctx context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	n := s.node

	n.applyMu.Lock()
	defer n.applyMu.Unlock()

	n.mu.Lock()
	inMaintenance := !n.configuredLocked()
	installed := n.installed
	current := n.active
	running := n.sw.running
	n.mu.Unlock()

	if !inMaintenance && !rolesFromContext(ctx).Includes(role.Admin) {
		return nil, errNotAuthorized
	}

	mode := in.GetMode()

	if mode != machine.ApplyConfigurationRequest_TRY {
		n.mu.Lock()
		n.cancelRollbackLocked()
		n.mu.Unlock()
	}

	cfg, err := loadNodeConfig(in.GetData(), running)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if !inMaintenance && cfg.RawV1Alpha1() == nil {
		return nil, status.Error(codes.InvalidArgument,
			"the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?")
	}

	validationMode := simMode{installed: installed}

	warnings, err := cfg.Validate(validationMode)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	runtimeWarnings, err := cfg.RuntimeValidate(ctx, n.st, validationMode)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	warnings = slices.Concat(warnings, runtimeWarnings)

	if inMaintenance && mode == machine.ApplyConfigurationRequest_REBOOT {
		mode = machine.ApplyConfigurationRequest_NO_REBOOT
	}

	details, detailsErr := detailsReboot, ""

	switch mode { //nolint:exhaustive
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		if err = canApplyImmediate(current, cfg); err != nil && !inMaintenance {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}

		details = detailsNoReboot
	case machine.ApplyConfigurationRequest_STAGED:
		details = detailsStaged
	case machine.ApplyConfigurationRequest_AUTO:
		if err = canApplyImmediate(current, cfg); err != nil && !inMaintenance {
			mode = machine.ApplyConfigurationRequest_REBOOT
			details, detailsErr = detailsReboot, ": "+err.Error()
		} else {
			mode = machine.ApplyConfigurationRequest_NO_REBOOT
			details = detailsNoReboot
		}
	}

	if in.GetDryRun() {
		diff, err := configDiffSummary(current, cfg)
		if err != nil {
			return nil, fmt.Errorf("failed to generate diff: %w", err)
		}

		return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
			Mode:        mode,
			ModeDetails: fmt.Sprintf("Dry run summary:\n%s (skipped in dry-run).\n%s", details, diff),
		}}}, nil
	}

	if mode == machine.ApplyConfigurationRequest_TRY {
		timeout := constants.ConfigTryTimeout
		if in.GetTryModeTimeout() != nil {
			timeout = in.GetTryModeTimeout().AsDuration()
		}

		details += fmt.Sprintf("\nThe config is applied in 'try' mode and will be automatically reverted back in %s", timeout.String())

		if err = n.applyEffect(mode, cfg, inMaintenance, timeout); err != nil {
			return nil, err
		}
	} else if err = n.applyEffect(mode, cfg, inMaintenance, 0); err != nil {
		return nil, err
	}

	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
		Mode:        mode,
		Warnings:    warnings,
		ModeDetails: details + detailsErr,
	}}}, nil
}

// applyEffect changes node state for a validated, non-dry-run apply in the resolved mode.
func (n *Node) applyEffect(mode machine.ApplyConfigurationRequest_Mode, cfg config.Provider, inMaintenance bool, tryTimeout time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()

	if n.stopped {
		return errNodeStopped
	}

	if inMaintenance {
		// Any mode installs a config that is complete for boot; a partial one (no v1alpha1) is only kept.
		if !cfg.CompleteForBoot() {
			n.active, n.persisted = cfg, cfg

			return n.publishLocked()
		}

		return n.startInstallLocked(cfg)
	}

	switch mode { //nolint:exhaustive
	case machine.ApplyConfigurationRequest_TRY:
		n.rollbackAfterLocked(tryTimeout)
		n.active = cfg
	case machine.ApplyConfigurationRequest_NO_REBOOT:
		n.active, n.persisted = cfg, cfg
	case machine.ApplyConfigurationRequest_STAGED:
		n.persisted = cfg
	case machine.ApplyConfigurationRequest_REBOOT:
		n.persisted = cfg

		if err := n.publishLocked(); err != nil {
			return err
		}

		return n.requestRebootLocked("reboot", "")
	default:
		return fmt.Errorf("incorrect mode '%s' specified for the apply config call", mode.String())
	}

	return n.publishLocked()
}

// canApplyImmediate reports whether next differs from current only in fields Talos applies without a
// reboot: it overwrites those fields of a copy of next with current's values and compares the rest.
func canApplyImmediate(current, next config.Provider) error {
	if current == nil {
		return errors.New("no current config")
	}

	cur := current.RawV1Alpha1()
	if cur == nil {
		return errors.New("current config is not v1alpha1")
	}

	nxt := next.RawV1Alpha1()
	if nxt == nil {
		return errors.New("new config is not v1alpha1")
	}

	nxt = nxt.DeepCopy()

	nxt.ConfigDebug = cur.ConfigDebug
	nxt.ClusterConfig = cur.ClusterConfig

	if nm, cm := nxt.MachineConfig, cur.MachineConfig; nm != nil && cm != nil {
		nm.MachineCA = cm.MachineCA
		nm.MachineAcceptedCAs = cm.MachineAcceptedCAs
		nm.MachineTime = cm.MachineTime //nolint:staticcheck // legacy field is still compared by Talos
		nm.MachineCertSANs = cm.MachineCertSANs
		nm.MachineInstall = cm.MachineInstall
		nm.MachineNetwork = cm.MachineNetwork //nolint:staticcheck // legacy field is still compared by Talos
		nm.MachineSysfs = cm.MachineSysfs
		nm.MachineSysctls = cm.MachineSysctls
		nm.MachineLogging = cm.MachineLogging
		nm.MachineControlPlane = cm.MachineControlPlane
		nm.MachineKubelet = cm.MachineKubelet
		nm.MachineKernel = cm.MachineKernel
		nm.MachineRegistries = cm.MachineRegistries //nolint:staticcheck // legacy field is still compared by Talos
		nm.MachinePods = cm.MachinePods
		nm.MachineSeccompProfiles = cm.MachineSeccompProfiles
		nm.MachineNodeAnnotations = cm.MachineNodeAnnotations
		nm.MachineNodeLabels = cm.MachineNodeLabels
		nm.MachineNodeTaints = cm.MachineNodeTaints

		if nf, cf := nm.MachineFeatures, cm.MachineFeatures; nf != nil && cf != nil {
			nf.KubernetesTalosAPIAccessConfig = cf.KubernetesTalosAPIAccessConfig
			nf.KubePrismSupport = cf.KubePrismSupport
			nf.HostDNSSupport = cf.HostDNSSupport
			nf.ImageCacheSupport = cf.ImageCacheSupport
			nf.FeatureNodeAddressSortAlgorithm = cf.FeatureNodeAddressSortAlgorithm
		}
	}

	if reflect.DeepEqual(cur, nxt) {
		return nil
	}

	diff, err := configdiff.DiffConfigs(container.NewV1Alpha1(cur), container.NewV1Alpha1(nxt))
	if err != nil {
		return fmt.Errorf("error calculating diff: %w", err)
	}

	return fmt.Errorf("this config change can't be applied in immediate mode\ndiff:\n%s", diff)
}

// configDiffSummary renders the dry-run "Config diff" section between the active and the new config.
func configDiffSummary(current, next config.Provider) (string, error) {
	var oldCfg config.Encoder
	if current != nil {
		oldCfg = current
	}

	diff, err := configdiff.DiffConfigs(oldCfg, next)
	if err != nil {
		return "", err
	}

	if diff == "" {
		diff = "No changes."
	}

	return "Config diff:\n\n" + diff, nil
}
