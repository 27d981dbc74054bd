package v1alpha1

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// SelectableFields lists, per kind, the fields beyond metadata.name and
// metadata.namespace that field selectors may name. The registry serves
// exactly these; a test keeps the two in step.
var SelectableFields = map[string][]string{
	"TalosCluster":           {"status.phase"},
	"TalosMachine":           {"spec.clusterName", "spec.role", "status.phase"},
	"TalosConfigPatch":       {"spec.clusterName"},
	"TalosOperation":         {"spec.clusterName", "spec.type", "status.phase"},
	"TalosCredentialRequest": {"spec.clusterName", "spec.purpose", "spec.username"},
	"MachineReclaim":         {"spec.clusterName", "status.phase"},
	"TalosBackup":            {"spec.clusterName", "status.phase"},
	"IchorUser":              {"spec.role"},
	"IchorInstallation":      {},
}

func init() {
	localSchemeBuilder.Register(addFieldLabelConversionFuncs)
}

// addFieldLabelConversionFuncs lets field selectors name the selectable fields;
// any other label is refused with an error naming it.
func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	for kind, labels := range SelectableFields {
		err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind(kind), func(label, value string) (string, string, error) {
			if label == "metadata.name" || label == "metadata.namespace" || slices.Contains(labels, label) {
				return label, value, nil
			}
			return "", "", fmt.Errorf("field label not supported for %s: %s", kind, label)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
