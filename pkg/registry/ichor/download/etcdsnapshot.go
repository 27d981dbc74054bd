package download

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// EtcdSnapshotREST is GET talosmachines/NAME/etcd-snapshot: the etcd
// database of a control plane, as `talosctl etcd snapshot` saves it.
type EtcdSnapshotREST struct {
	Deps
	streamEndpoint
}

var (
	_ rest.GetterWithOptions = &EtcdSnapshotREST{}
	_ rest.StorageMetadata   = &EtcdSnapshotREST{}
)

// New returns an empty TalosMachine, the kind the subresource belongs to.
func (r *EtcdSnapshotREST) New() runtime.Object { return &ichor.TalosMachine{} }

// NewGetOptions returns the download's query parameters.
func (r *EtcdSnapshotREST) NewGetOptions() (runtime.Object, bool, string) {
	return &ichor.DownloadOptions{}, false, ""
}

// Get checks the request and returns the snapshot's stream, opened when
// the response reads it.
func (r *EtcdSnapshotREST) Get(ctx context.Context, name string, options runtime.Object) (runtime.Object, error) {
	subresource := r.row.Subresource
	if err := refuseDryRun(options.(*ichor.DownloadOptions).DryRun); err != nil {
		return nil, err
	}
	m, user, err := r.machineFor(ctx, name, subresource)
	if err != nil {
		return nil, err
	}
	if m.Spec.Role != ichor.MachineRoleControlPlane {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("TalosMachine %s is a %s; etcd runs on control planes only", name, m.Spec.Role))
	}
	return &download{
		deps: &r.Deps, user: user, object: reference("TalosMachine", m), contentType: r.row.ContentType,
		what: fmt.Sprintf("the %s of TalosMachine %s", subresource, m.Name),
		open: func(ctx context.Context) (*opened, error) {
			node, credential, err := r.session(ctx, m, v1alpha1.PurposeEtcdSnapshot)
			if err != nil {
				return nil, err
			}
			body, err := node.EtcdSnapshot(ctx)
			if err != nil {
				_ = node.Close()
				return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("etcd snapshot of TalosMachine %s: %v", name, err))
			}
			return &opened{body: body, release: func() { _ = node.Close() }, credential: credential}, nil
		},
	}, nil
}
