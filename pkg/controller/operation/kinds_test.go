package operation

import (
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestEveryOperationTypeHasARunner: the controller runs exactly the types
// ichor.Operations describes, each with a start and a follow.
func TestEveryOperationTypeHasARunner(t *testing.T) {
	for _, d := range ichor.Operations {
		k, ok := kinds[v1alpha1.OperationType(d.Type)]
		switch {
		case !ok:
			t.Errorf("%s is an operation type with no runner: add one to kinds", d.Type)
		case k.start == nil || k.follow == nil:
			t.Errorf("the runner of %s has no start or no follow", d.Type)
		}
	}
	for typ := range kinds {
		if _, ok := ichor.OperationFor(ichor.OperationType(typ)); !ok {
			t.Errorf("kinds runs %s, which ichor.Operations does not describe: the API refuses it", typ)
		}
	}
}
