package statusapply

import (
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RemoveIfUnchanged removes the status field at path (a JSON pointer such
// as /status/override) from obj, in one JSON patch that first tests the
// field still holds value: a field that another writer changed or removed
// meanwhile is left as it is, and removed is false. It patches a copy, so
// obj keeps whatever status its caller is building. It is how a controller
// gives back or uses up a field it does not own through a field manager
// (the disruption budget, an admin's override grant).
func RemoveIfUnchanged(ctx context.Context, c client.Client, obj client.Object, path string, value any) (removed bool, err error) {
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": value},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return false, err
	}
	err = c.Status().Patch(ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(types.JSONPatchType, patch))
	if apierrors.IsInvalid(err) { // the test failed
		return false, nil
	}
	return err == nil, err
}
