package talossim

import (
	"bytes"
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
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.yaml.in/yaml/v4"
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

// loadNodeConfig parses a config as a node running the given Talos version does: the document
// kinds later releases added (the Kubernetes documents of v1.14: KubeletConfig, KubeClusterConfig,
// …) only from that release on, so an older node refuses them as unknown, like Talos.
func loadNodeConfig(data []byte, running string) (config.Provider, error) {
	if runsUpTo1_13(running) {
		if err := refuseKindsUnknownTo1_13(data); err != nil {
			return nil, err
		}
	}

	return configloader.NewFromBytes(data)
}

// runsUpTo1_13 reports whether the running Talos version is v1.13 or older.
func runsUpTo1_13(running string) bool {
	contract, err := config.ParseContractFromVersion(running)

	return err == nil && !contract.Greater(config.TalosVersion1_13)
}

// installRequiredUpTo1_13 is the check Talos up to v1.13 makes of a config that a node yet to be
// installed validates: it must say how to install (machine.install). Talos v1.14 also installs
// from an UnattendedInstallConfig document, or not at all, and its machinery has no such check.
func installRequiredUpTo1_13(cfg config.Provider, mode validation.RuntimeMode, running string) error {
	if !runsUpTo1_13(running) || !mode.RequiresInstall() {
		return nil
	}

	v1 := cfg.RawV1Alpha1()
	if v1 == nil || v1.MachineConfig == nil || v1.MachineConfig.MachineInstall != nil { //nolint:staticcheck // the v1.13 layout
		return nil
	}

	return fmt.Errorf("v1alpha1.Config: install instructions are required in %q mode", mode)
}

// talos1_13Kinds are the config document kinds Talos v1.13's machinery registers.
var talos1_13Kinds = map[string]struct{}{
	"v1alpha1": {},
	// block
	"VolumeConfig": {}, "UserVolumeConfig": {}, "RawVolumeConfig": {}, "ExistingVolumeConfig": {},
	"ExternalVolumeConfig": {}, "SwapVolumeConfig": {}, "ZswapConfig": {},
	// cri
	"RegistryAuthConfig": {}, "RegistryMirrorConfig": {}, "RegistryTLSConfig": {},
	// hardware
	"PCIDriverRebindConfig": {},
	// network
	"BlackholeRouteConfig": {}, "BondConfig": {}, "BridgeConfig": {}, "DHCPv4Config": {}, "DHCPv6Config": {},
	"DummyLinkConfig": {}, "EthernetConfig": {}, "HCloudVIPConfig": {}, "HostnameConfig": {}, "KubeSpanConfig": {},
	"KubeSpanEndpointsConfig": {}, "Layer2VIPConfig": {}, "LinkAliasConfig": {}, "LinkConfig": {},
	"NetworkDefaultActionConfig": {}, "NetworkRuleConfig": {}, "ResolverConfig": {}, "RoutingRuleConfig": {},
	"StaticHostConfig": {}, "TCPProbeConfig": {}, "TimeSyncConfig": {}, "VLANConfig": {}, "VRFConfig": {},
	"WireguardConfig": {},
	// runtime
	"EnvironmentConfig": {}, "EventSinkConfig": {}, "ExtensionServiceConfig": {}, "KmsgLogConfig": {},
	"OOMConfig": {}, "WatchdogTimerConfig": {},
	// security, siderolink
	"ImageVerificationConfig": {}, "TrustedRootsConfig": {}, "SideroLinkConfig": {},
}

// refuseKindsUnknownTo1_13 fails, as Talos v1.13's config decoder does, on the first document whose
// kind that release does not know. Documents it cannot read are left to configloader, which
// reports them.
func refuseKindsUnknownTo1_13(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))

	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			return nil //nolint:nilerr // io.EOF, or a syntax error configloader reports
		}

		for _, manifest := range doc.Content {
			if manifest.Kind != yaml.MappingNode {
				continue
			}

			var apiVersion, kind, name, version string

			for i := 0; i+1 < len(manifest.Content); i += 2 {
				key, value := manifest.Content[i].Value, manifest.Content[i+1].Value

				switch key {
				case "apiVersion":
					apiVersion, version = value, value
				case "kind":
					kind = value
				case "name":
					name = value
				case "machine", "cluster", "debug", "persist":
					version = "v1alpha1"
				}
			}

			if kind == "" {
				continue // v1alpha1, or a document without a kind configloader refuses
			}

			if _, ok := talos1_13Kinds[kind]; !ok {
				return fmt.Errorf("error decoding document %s/%s/%s (line %d): %q %q: not registered",
					apiVersion, kind, name, manifest.Line, kind, version)
			}
		}
	}
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

	warnings, err := cfg.ValidateAsClient(validationMode)
	if err = errors.Join(err, installRequiredUpTo1_13(cfg, validationMode, running), refuseVolumeConfigsUnknownTo1_13(cfg, running)); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	runtimeWarnings, err := cfg.RuntimeValidate(ctx, n.st, validationMode) //nolint:staticcheck // Talos v1.13 reports the two validations apart; ValidateAtRuntime joins them
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	warnings = slices.Concat(warnings, runtimeWarnings)

	if inMaintenance && mode == machine.ApplyConfigurationRequest_REBOOT {
		mode = machine.ApplyConfigurationRequest_NO_REBOOT
	}

	// From v1.14 Talos applies every config live: a change that only takes
	// effect at boot waits for the next one, the REBOOT mode is refused, and
	// AUTO never reboots.
	if !runsUpTo1_13(running) && !inMaintenance {
		switch mode { //nolint:exhaustive
		case machine.ApplyConfigurationRequest_REBOOT: //nolint:staticcheck // what Talos v1.14 refuses
			return nil, status.Error(codes.Unimplemented, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")
		case machine.ApplyConfigurationRequest_AUTO:
			mode = machine.ApplyConfigurationRequest_NO_REBOOT
		}
	}

	details, detailsErr := detailsReboot, ""

	switch mode { //nolint:exhaustive
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		if err = canApplyImmediate(current, cfg); err != nil && !inMaintenance && runsUpTo1_13(running) {
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
