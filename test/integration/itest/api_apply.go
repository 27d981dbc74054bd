package itest

import (
	"encoding/json"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// APIManagedFields returns the fields manager owns through operation on
// subresource, as the parsed FieldsV1 document; nil when it has no entry.
func APIManagedFields(t *testing.T, obj metav1.Object, manager string, op metav1.ManagedFieldsOperationType, subresource string) map[string]any {
	t.Helper()
	var found map[string]any
	for _, e := range obj.GetManagedFields() {
		if e.Manager != manager || e.Operation != op || e.Subresource != subresource {
			continue
		}
		if found != nil {
			t.Fatalf("manager %s has two %s entries on %q", manager, op, subresource)
		}
		if e.FieldsV1 == nil {
			t.Fatalf("manager %s entry has no fieldsV1", manager)
		}
		found = map[string]any{}
		if err := json.Unmarshal(e.FieldsV1.Raw, &found); err != nil {
			t.Fatalf("fieldsV1 of %s: %v", manager, err)
		}
	}
	return found
}

// APIOwns reports whether a FieldsV1 document holds path (f:spec, f:hostname, ...).
func APIOwns(fields map[string]any, path ...string) bool {
	cur := fields
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return false
		}
		cur = next
	}
	return true
}

func APITopLevelKeys(fields map[string]any) []string {
	var keys []string
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
