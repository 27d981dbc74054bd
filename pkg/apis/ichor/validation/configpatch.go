package validation

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// maxPatchBytes keeps a patch well inside etcd's object size limit.
const maxPatchBytes = 256 * 1024

// ValidateTalosConfigPatch checks a TalosConfigPatch on create.
func ValidateTalosConfigPatch(p *ichor.TalosConfigPatch) field.ErrorList {
	errs := validateNamespacedMeta(&p.ObjectMeta)
	return append(errs, validateTalosConfigPatchSpec(&p.Spec, field.NewPath("spec"))...)
}

// ValidateTalosConfigPatchUpdate checks a TalosConfigPatch on update. A patch
// stays with its cluster; retargeting within the cluster is allowed.
func ValidateTalosConfigPatchUpdate(p, old *ichor.TalosConfigPatch) field.ErrorList {
	errs := validateMetaUpdate(&p.ObjectMeta, &old.ObjectMeta)
	spec := field.NewPath("spec")
	errs = append(errs, validateTalosConfigPatchSpec(&p.Spec, spec)...)
	return append(errs, validateImmutable(p.Spec.ClusterName, old.Spec.ClusterName, spec.Child("clusterName"), "")...)
}

// ValidateTalosConfigPatchStatusUpdate checks a status written through /status.
func ValidateTalosConfigPatchStatusUpdate(p, old *ichor.TalosConfigPatch) field.ErrorList {
	errs := validateMetaUpdate(&p.ObjectMeta, &old.ObjectMeta)
	status := field.NewPath("status")
	errs = append(errs, validateConditions(p.Status.Conditions, status.Child("conditions"))...)
	errs = append(errs, validateOptionalEnum(p.Status.Effect, status.Child("effect"), configEffects...)...)
	return append(errs, validateNameList(p.Status.AppliedMachines, status.Child("appliedMachines"))...)
}

func validateTalosConfigPatchSpec(s *ichor.TalosConfigPatchSpec, fldPath *field.Path) field.ErrorList {
	errs := validateRequiredName(s.ClusterName, fldPath.Child("clusterName"))
	errs = append(errs, validatePatchTarget(&s.Target, fldPath.Child("target"))...)
	patchPath := fldPath.Child("patch")
	switch {
	case strings.TrimSpace(s.Patch) == "":
		errs = append(errs, field.Required(patchPath, "a Talos machine-config patch as YAML"))
	case len(s.Patch) > maxPatchBytes:
		errs = append(errs, field.TooLong(patchPath, "", maxPatchBytes))
	default:
		if err := checkPatchDocuments(s.Patch); err != nil {
			errs = append(errs, field.Invalid(patchPath, "<patch>", err.Error()))
		}
	}
	return errs
}

func validatePatchTarget(t *ichor.PatchTarget, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	set := 0
	if t.Role != "" {
		set++
		errs = append(errs, validateEnum(t.Role, fldPath.Child("role"), ichor.MachineRoleControlPlane, ichor.MachineRoleWorker)...)
	}
	if len(t.Machines) > 0 {
		set++
		errs = append(errs, validateNameList(t.Machines, fldPath.Child("machines"))...)
	}
	if t.Selector != nil {
		set++
		errs = append(errs, metav1validation.ValidateLabelSelector(t.Selector, metav1validation.LabelSelectorValidationOptions{}, fldPath.Child("selector"))...)
	}
	if set > 1 {
		errs = append(errs, field.Forbidden(fldPath, "set at most one of role, machines and selector"))
	}
	return errs
}

// checkPatchDocuments requires every YAML document of a patch to be a mapping,
// which is what Talos's strategic-merge patches are.
func checkPatchDocuments(patch string) error {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(patch)))
	docs := 0
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		if strings.TrimSpace(string(doc)) == "" || strings.TrimSpace(string(doc)) == "---" {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return fmt.Errorf("document %d must be a YAML mapping: %w", i, err)
		}
		if len(m) == 0 {
			return fmt.Errorf("document %d is empty", i)
		}
		docs++
	}
	if docs == 0 {
		return errors.New("has no YAML document")
	}
	return nil
}
