package operation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	ichorac "ichor.dev/ichor/pkg/generated/applyconfiguration/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/imageref"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/schematic"
	"ichor.dev/ichor/pkg/talos"
)

// lifecycleAPI is the first Talos minor whose nodes serve
// LifecycleService.Upgrade; older nodes upgrade through the legacy
// MachineService.Upgrade, which reboots by itself.
var lifecycleAPI = semver.MustParse("1.13.0")

// startTalosUpgrade upgrades one node, as `talosctl upgrade` v1.13 does and
// with Ichor's own checks first: a node at the version already is done; a
// path the installer would refuse fails here, with its reason; the
// installer image (the node's own installer repository at the new tag) is
// pulled before the node is touched. Staged, the installer runs and the
// step ends: the node runs the new version from its next reboot. Otherwise
// the node waits for the cluster to allow it to go, forfeits etcd
// leadership (a control plane), has the installer write the new version
// and reboots into it.
func startTalosUpgrade(ctx context.Context, s *step) (ctrl.Result, error) {
	params := s.x.op.Spec.TalosUpgrade
	target := params.Version
	cctx, cancel := s.call(ctx)
	defer cancel()
	running, err := s.node.Version(cctx)
	if err != nil {
		return s.wait("reading the node's Talos version: %v", err)
	}
	what := fmt.Sprintf("upgrading Talos %s to %s", running, target)
	if running == target {
		differs, err := s.schematicDiffers(cctx, target)
		if err != nil {
			return s.wait("reading the node's schematic: %v", err)
		}
		if differs == "" {
			return s.done(ctx, "runs Talos %s already", target)
		}
		// The same version of another schematic: its installer installs
		// the new extensions, as any upgrade, under the budget.
		what = fmt.Sprintf("installing Talos %s again: %s", target, differs)
	}
	if err := upgradePath(running, target, meta.IsStatusConditionTrue(s.x.op.Status.Conditions, v1alpha1.OperationConditionDowngradeOverridden)); err != nil {
		return s.failed(ctx, "%v", err)
	}
	image, err := s.installerImage(cctx, target)
	if err != nil {
		return s.failed(ctx, "%v", err)
	}
	legacy := olderThan(running, lifecycleAPI)
	if legacy && params.Stage {
		return s.failed(ctx, "the node runs Talos %s, which stages upgrades only through the legacy API's reboot; upgrade it without stage", running)
	}

	ictx, icancel := context.WithTimeout(ctx, s.r.Options.InstallTimeout)
	defer icancel()
	if err := s.node.PullImage(ictx, image); err != nil {
		return s.failed(ctx, "pull the installer: %v", err)
	}
	if params.Stage {
		if err := s.node.Upgrade(ictx, image); err != nil {
			return s.failed(ctx, "%v", installFailure(err))
		}
		return s.done(ctx, "staged Talos %s (%s): the node runs it from its next reboot", target, image)
	}

	prepare := func(cctx context.Context) error {
		if err := s.drain(cctx); err != nil {
			return err
		}
		if render.MachineRole(s.m) == v1alpha1.MachineRoleControlPlane {
			if err := s.node.ForfeitEtcdLeadership(cctx); err != nil {
				return err
			}
		}
		if legacy {
			return nil // the legacy call installs and reboots at once
		}
		return installFailure(s.node.Upgrade(ictx, image))
	}
	call := func(cctx context.Context) error {
		if legacy {
			return s.node.UpgradeLegacy(ictx, image)
		}
		return s.node.Reboot(cctx, false)
	}
	return s.reboot(ctx, what, prepare, call)
}

// followTalosUpgrade waits for the node to be back at the new version,
// then records the version the machine runs.
func followTalosUpgrade(ctx context.Context, s *step) (ctrl.Result, error) {
	target := s.x.op.Spec.TalosUpgrade.Version
	// The node still runs the boot the step recorded: the request was lost.
	// The installer ran before the step was recorded, so a reboot is what
	// is left, unless the node upgrades through the legacy call, which
	// installs and reboots at once.
	again := func(ctx context.Context) error {
		running, err := s.node.Version(ctx)
		if err != nil {
			return err
		}
		if olderThan(running, lifecycleAPI) {
			image, err := s.installerImage(ctx, target)
			if err != nil {
				return err
			}
			return s.node.UpgradeLegacy(ctx, image)
		}
		return s.node.Reboot(ctx, false)
	}
	back, res, err := s.backFromReboot(ctx, again)
	if !back || err != nil {
		if err == nil && s.record().Phase == v1alpha1.OperationRunning {
			// Away: the next nodes pull meanwhile (not once it is back,
			// when the next step starts and pulls itself).
			s.r.prepulls.next(ctx, s)
		}
		return res, err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	running, err := s.node.Version(cctx)
	if err != nil {
		return s.wait("reading the node's Talos version: %v", err)
	}
	if running != target {
		return s.failed(ctx, "the node rebooted into Talos %s, not %s: the installer's boot assets did not take", running, target)
	}
	if differs, err := s.schematicDiffers(cctx, target); err != nil {
		return s.wait("reading the node's schematic: %v", err)
	} else if differs != "" {
		return s.failed(ctx, "the node rebooted into Talos %s, but %s: the installer's image did not take", running, differs)
	}
	// The node runs the new version: the machine's status says so while
	// its Node is awaited.
	recorded := make(chan error, 1)
	go func() {
		if s.m.Status.TalosVersion == running {
			recorded <- nil
			return
		}
		recorded <- recordVersion(ctx, s.r.Client, s.m, running)
	}()
	back, res, err = s.nodeBack(ctx)
	rerr := <-recorded
	if !back || err != nil {
		// A step nodeBack failed, or one that waits, keeps that result; a
		// version not recorded is written on the next poll.
		return res, err
	}
	if rerr != nil {
		return ctrl.Result{}, rerr
	}
	return s.done(ctx, "runs Talos %s and is ready", running)
}

// recordVersion applies the Talos version a machine runs to its status.
// Intake recorded it from the maintenance API; once a machine is
// configured intake no longer looks, so an upgrade takes the field over.
func recordVersion(ctx context.Context, c client.Client, m *v1alpha1.TalosMachine, version string) error {
	obj := ichorac.TalosMachine(m.Name, m.Namespace).WithStatus(ichorac.TalosMachineStatus().WithTalosVersion(version))
	if err := c.Status().Apply(ctx, obj, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("record the Talos version of TalosMachine %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

// installerImage is the installer image of target: the repository of the
// installer the node's config names (machine.install.image), or else the
// controller's --install-image, at target's tag.
func (s *step) installerImage(ctx context.Context, target string) (string, error) {
	return installerImage(ctx, s.r, s.node, target)
}

// installerImage is the installer of target for node: the one its config
// names, or --install-image, at target's tag.
func installerImage(ctx context.Context, r *Reconciler, node talos.Node, target string) (string, error) {
	raw, err := node.Config(ctx)
	if err != nil {
		return "", fmt.Errorf("read the node's config for its installer image: %w", err)
	}
	cfg, err := configloader.NewFromBytes(raw)
	if err != nil {
		return "", fmt.Errorf("parse the node's config: %w", err)
	}
	image := cmp.Or(render.InstallerImage(cfg), r.Options.InstallImage)
	if image == "" {
		return "", errors.New("no installer image is known: the node's config names none (machine.install.image, or UnattendedInstallConfig's installer.image from Talos v1.14) and ichor-controller runs without --install-image")
	}
	return imageref.WithTag(image, target), nil
}

// schematicDiffers says how the schematic of the installer the node's config
// names at target differs from the one the node booted, or "" when they
// are one (or the installer is no Image Factory's, which names none).
func (s *step) schematicDiffers(ctx context.Context, target string) (string, error) {
	image, err := s.installerImage(ctx, target)
	if err != nil {
		return "", nil // no installer: nothing to install
	}
	_, want, _, _, err := schematic.ParseInstaller(image, "")
	if err != nil {
		return "", nil
	}
	have, err := s.node.Schematic(ctx)
	if err != nil || have == want {
		return "", err
	}
	return fmt.Sprintf("the node booted schematic %q, its config names %s", have, image), nil
}

// checkTalosUpgrade refuses, before any node is touched, an upgrade to a
// version older than one a target machine runs (its status.talosVersion):
// machinery's table allows some downgrades, Ichor none unless an admin
// let this cluster's next operation past the TalosDowngrade check, which
// the operation then uses up and records. Each step checks its node's own
// version again (upgradePath), for a status that lags.
func (r *Reconciler) checkTalosUpgrade(ctx context.Context, op *v1alpha1.TalosOperation, cluster *v1alpha1.TalosCluster, targets []*v1alpha1.TalosMachine) (string, error) {
	target := op.Spec.TalosUpgrade.Version
	var newer []string
	newest := ""
	for _, m := range targets {
		if running := m.Status.TalosVersion; running != "" && olderVersion(target, running) {
			newer = append(newer, m.Name)
			if newest == "" || olderVersion(newest, running) {
				newest = running
			}
		}
	}
	if len(newer) == 0 {
		return "", nil
	}
	if granted := cluster.Status.Override; granted != nil && granted.Check == v1alpha1.CheckTalosDowngrade {
		if err := useOverride(ctx, r.Client, cluster, granted); err != nil {
			return "", err
		}
		meta.SetStatusCondition(&op.Status.Conditions, metav1.Condition{Type: v1alpha1.OperationConditionDowngradeOverridden,
			Status: metav1.ConditionTrue, Reason: v1alpha1.OperationReasonOverridden, ObservedGeneration: op.Generation, LastTransitionTime: metav1.NewTime(r.Now()),
			Message: fmt.Sprintf("takes %s from %s down to Talos %s, past the %s check, as %s allowed: %s",
				strings.Join(newer, ", "), newest, target, granted.Check, granted.By, granted.Reason)})
		events.Record(r.Recorder, op, nil, v1alpha1.EventOverrideUsed, "Start",
			"Downgrading %s from %s to Talos %s, past the %s check, as %s allowed: %s", strings.Join(newer, ", "), newest, target, granted.Check, granted.By, granted.Reason)
		return "", nil
	}
	return fmt.Sprintf("spec.talosUpgrade.version: Talos %s is older than what TalosMachine %s runs (up to %s), and Ichor does not downgrade Talos: "+
		"choose %s or later, or an admin lets this cluster's next operation past the %s check (talosclusters/override)",
		target, strings.Join(newer, ", "), newest, newest, v1alpha1.CheckTalosDowngrade), nil
}

// upgradePath refuses a downgrade (unless downgrade, an admin's override),
// and what the target's installer refuses: machinery's table of the
// versions each release upgrades from for the releases it knows; for a
// newer release, Talos's rule of upgrading through every minor.
func upgradePath(running, target string, downgrade bool) error {
	t, err := compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: target})
	if err != nil {
		return fmt.Errorf("spec.talosUpgrade.version %s: %w", target, err)
	}
	h, err := compatibility.ParseTalosVersion(&machineapi.VersionInfo{Tag: running})
	if err != nil {
		return fmt.Errorf("the node's version %s: %w", running, err)
	}
	if olderVersion(target, running) && !downgrade {
		return fmt.Errorf("Talos %s is older than the %s the node runs, and Ichor does not downgrade Talos without an admin's override of the %s check",
			target, running, v1alpha1.CheckTalosDowngrade)
	}
	err = t.UpgradeableFrom(h)
	if err == nil {
		return nil
	}
	if !strings.Contains(err.Error(), "are not supported") {
		return fmt.Errorf("Talos's installer refuses this path: %w", err)
	}
	tv, hv := semver.MustParse(strings.TrimPrefix(t.String(), "v")), semver.MustParse(strings.TrimPrefix(h.String(), "v"))
	if tv.Major != hv.Major || tv.Minor > hv.Minor+1 {
		return fmt.Errorf("Talos upgrades go through every minor release: upgrade from %s to the latest v%d.%d first", running, hv.Major, hv.Minor+1)
	}
	return nil
}

// olderThan reports whether version v is older than min.
func olderThan(v string, min semver.Version) bool {
	parsed, err := semver.ParseTolerant(v)
	return err == nil && parsed.LT(min)
}

// olderVersion reports whether version v is older than version than.
func olderVersion(v, than string) bool {
	t, err := semver.ParseTolerant(than)
	return err == nil && olderThan(v, t)
}

// installFailure words an installer that refused or failed.
func installFailure(err error) error {
	if err == nil {
		return nil
	}
	var ie *talos.InstallerError
	if errors.As(err, &ie) {
		return fmt.Errorf("the node refused the upgrade: %w", err)
	}
	return err
}
