package download

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/fields"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// talosconfigReader streams GET talosclusters/NAME/talosconfig-reader: a
// talosconfig for the cluster's control planes with an os:reader client
// certificate, valid for the installation's readerTalosconfig lifetime (at
// most an hour), made when the response reads it. Its key is made for this
// download and handed to the user; the server keeps no copy.
func talosconfigReader(ctx context.Context, r request[*ichor.TalosCluster, *ichor.DownloadOptions]) (string, opener, error) {
	cluster := r.object
	endpoints, err := r.controlPlaneEndpoints(ctx, cluster)
	if err != nil {
		return "", nil, err
	}
	what := fmt.Sprintf("a %s talosconfig of TalosCluster %s", r.row.Subresource, cluster.Name)
	return what, func(ctx context.Context) (*opened, error) {
		issued, err := r.Credentials.Request(ctx, cluster.Namespace, cluster.Name, nil, v1alpha1.PurposeTalosconfigReader)
		if err != nil {
			return nil, err
		}
		contextName := cluster.Namespace + "/" + cluster.Name + "-reader"
		cfg := clientconfig.NewConfig(contextName, endpoints, issued.CA, &x509.PEMEncodedCertificateAndKey{Crt: issued.Certificate, Key: issued.Key})
		data, err := cfg.Bytes()
		if err != nil {
			return nil, fmt.Errorf("encode the talosconfig of TalosCluster %s: %w", cluster.Name, err)
		}
		return &opened{body: io.NopCloser(bytes.NewReader(data)), credential: issued.Request}, nil
	}, nil
}

// controlPlaneEndpoints are the Talos API addresses of the cluster's
// configured control planes, sorted; a cluster without one has no
// talosconfig to give yet.
func (d *Deps) controlPlaneEndpoints(ctx context.Context, cluster *ichor.TalosCluster) ([]string, error) {
	obj, err := d.Machines.List(ctx, &metainternalversion.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.clusterName", cluster.Name),
	})
	if err != nil {
		return nil, err
	}
	var endpoints []string
	for i := range obj.(*ichor.TalosMachineList).Items {
		m := &obj.(*ichor.TalosMachineList).Items[i]
		if m.Spec.Role == ichor.MachineRoleControlPlane && configuredMember(m) {
			endpoints = append(endpoints, m.Spec.Address)
		}
	}
	if len(endpoints) == 0 {
		return nil, apierrors.NewConflict(ichor.Resource("talosclusters"), cluster.Name,
			errors.New("it has no configured control plane yet, so a talosconfig would have no endpoint"))
	}
	slices.Sort(endpoints)
	return endpoints, nil
}
