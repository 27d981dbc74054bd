package render

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
)

// Render produces the machine config of in.Machine: machinery's generated
// config for the cluster's inputs, with the targeting patches applied in the
// documented order (see the package doc), validated by machinery. On any error
// it returns no config: a *PatchError when a patch is at fault, an
// *InputError when the cluster or machine inputs are.
func Render(in Input) (Rendered, error) {
	switch {
	case in.Cluster == nil:
		return Rendered{}, errors.New("render: no TalosCluster given")
	case in.Machine == nil:
		return Rendered{}, errors.New("render: no TalosMachine given")
	case in.Secrets == nil:
		// The generator would make a random bundle, which would be a different cluster.
		return Rendered{}, &InputError{Field: "TalosCluster.spec.secretsRef", Err: errors.New("no secrets bundle given")}
	}

	base, contract, err := baseConfig(in)
	if err != nil {
		return Rendered{}, err
	}
	if _, _, err := finish(base); err != nil {
		// Before patches, only the cluster and machine specs shaped the config.
		return Rendered{}, &InputError{Field: "TalosCluster.spec/TalosMachine.spec",
			Err: fmt.Errorf("generated config is invalid before any patch: %w", err)}
	}

	patches, err := selectPatches(in.Cluster, in.Machine, in.Patches)
	if err != nil {
		return Rendered{}, err
	}

	// steps[i] is the config after patches[:i]; steps[0] is the base.
	steps := make([]config.Provider, 0, len(patches)+1)
	steps = append(steps, base)
	for _, p := range patches {
		next, err := applyPatch(steps[len(steps)-1], p)
		if err != nil {
			return Rendered{}, err
		}
		if err := unknownKinds(next, contract); err != nil {
			return Rendered{}, &PatchError{Patch: nameOf(p.patch), Reason: PatchInvalidResult, Err: err}
		}
		if err := layoutConflicts(next); err != nil {
			return Rendered{}, &PatchError{Patch: nameOf(p.patch), Reason: PatchInvalidResult, Err: err}
		}
		steps = append(steps, next)
	}

	final, warnings, err := finish(steps[len(steps)-1])
	if err != nil {
		return Rendered{}, blameInvalid(steps, patches, err)
	}

	data, err := final.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return Rendered{}, fmt.Errorf("render: encode config: %w", err)
	}
	sum := sha256.Sum256(data)

	applied := make([]AppliedPatch, len(patches))
	for i, p := range patches {
		applied[i] = AppliedPatch{Patch: nameOf(p.patch), Generation: p.patch.Generation, Scope: p.scope}
	}
	return Rendered{Config: data, Hash: hex.EncodeToString(sum[:]), Applied: applied, Warnings: warnings, Contract: contractName(contract)}, nil
}

// ContractOf is the name of the version contract of Talos version (v1.14.1
// is of the v1.14 contract), as Rendered.Contract says it.
func ContractOf(version string) (string, error) {
	contract, err := config.ParseContractFromVersion(version)
	if err != nil {
		return "", err
	}
	return contractName(contract), nil
}

func contractName(c *config.VersionContract) string {
	return fmt.Sprintf("v%d.%d", c.Major, c.Minor)
}

// blameInvalid names the patch that made the final config invalid: the one
// applied right after the last config that still validated. Patches may pass
// through an invalid state that a later patch repairs, so only the final
// config is judged, and blame goes to the patch after which it never
// validated again. The base is known valid, so some patch is always named.
func blameInvalid(steps []config.Provider, patches []scopedPatch, finalErr error) error {
	culprit := len(patches) - 1
	for i := len(steps) - 2; i >= 1; i-- {
		if _, _, err := finish(steps[i]); err == nil {
			break
		}
		culprit = i - 1
	}
	return &PatchError{Patch: nameOf(patches[culprit].patch), Reason: PatchInvalidResult, Err: finalErr}
}
