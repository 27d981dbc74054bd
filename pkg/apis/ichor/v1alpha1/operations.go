package v1alpha1

import "ichor.dev/ichor/pkg/apis/ichor"

// OperationTypes are every operation type, in the order the API lists them:
// those of ichor.Operations, which describes each.
var OperationTypes = func() []OperationType {
	var types []OperationType
	for _, t := range ichor.OperationTypes() {
		types = append(types, OperationType(t))
	}
	return types
}()
