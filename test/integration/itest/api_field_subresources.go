package itest

import (
	"context"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// PutClusterSubresource updates a TalosCluster through one of its
// subresources with the REST client (hyphenated subresources have no typed
// methods).
func PutClusterSubresource(ctx context.Context, cs versioned.Interface, c *v1alpha1.TalosCluster, subresource string) (*v1alpha1.TalosCluster, error) {
	out := &v1alpha1.TalosCluster{}
	err := cs.IchorV1alpha1().RESTClient().Put().Namespace(c.Namespace).Resource("talosclusters").Name(c.Name).
		SubResource(subresource).Body(c).Do(ctx).Into(out)
	return out, err
}
