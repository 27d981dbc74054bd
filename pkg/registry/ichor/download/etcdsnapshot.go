package download

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// etcdSnapshot streams GET talosmachines/NAME/etcd-snapshot: the etcd
// database of a control plane, as `talosctl etcd snapshot` saves it.
func etcdSnapshot(_ context.Context, r request[*ichor.TalosMachine, *ichor.DownloadOptions]) (string, opener, error) {
	m := r.object
	if m.Spec.Role != ichor.MachineRoleControlPlane {
		return "", nil, apierrors.NewBadRequest(fmt.Sprintf("TalosMachine %s is a %s; etcd runs on control planes only", m.Name, m.Spec.Role))
	}
	what := fmt.Sprintf("the %s of TalosMachine %s", r.row.Subresource, m.Name)
	return what, func(ctx context.Context) (*opened, error) {
		node, credential, err := r.session(ctx, m, v1alpha1.PurposeEtcdSnapshot)
		if err != nil {
			return nil, err
		}
		body, err := node.EtcdSnapshot(ctx)
		if err != nil {
			_ = node.Close()
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("etcd snapshot of TalosMachine %s: %v", m.Name, err))
		}
		return &opened{body: body, release: func() { _ = node.Close() }, credential: credential}, nil
	}, nil
}
