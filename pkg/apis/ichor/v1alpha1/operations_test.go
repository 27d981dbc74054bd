package v1alpha1

import (
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// TestDefaultedOperationParameters: the parameter blocks ichor.Operations
// calls defaulted are filled in by defaulting, so a request may leave them
// out although validation requires them.
func TestDefaultedOperationParameters(t *testing.T) {
	for _, d := range ichor.Operations {
		for _, p := range d.Parameters {
			spec := TalosOperationSpec{Type: OperationType(d.Type)}
			SetDefaults_TalosOperationSpec(&spec)
			var internal ichor.TalosOperationSpec
			if err := Convert_v1alpha1_TalosOperationSpec_To_ichor_TalosOperationSpec(&spec, &internal, nil); err != nil {
				t.Fatal(err)
			}
			if p.Presence == ichor.ParameterDefaulted && !p.IsSet(&internal) {
				t.Errorf("%s: %s is defaulted, but defaulting leaves it out", d.Type, p.Path())
			}
		}
	}
}
