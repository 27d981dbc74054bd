package download

import (
	"context"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// SupportBundleREST is GET talosmachines/NAME/support-bundle: a zip archive
// of the node's version, services, logs, kernel log and main resources, as
// os:reader reads them (talos.Node.SupportBundle says what is in it).
type SupportBundleREST struct {
	Deps
	streamEndpoint
}

var (
	_ rest.GetterWithOptions = &SupportBundleREST{}
	_ rest.StorageMetadata   = &SupportBundleREST{}
)

// New returns an empty TalosMachine, the kind the subresource belongs to.
func (r *SupportBundleREST) New() runtime.Object { return &ichor.TalosMachine{} }

// NewGetOptions returns the download's query parameters.
func (r *SupportBundleREST) NewGetOptions() (runtime.Object, bool, string) {
	return &ichor.DownloadOptions{}, false, ""
}

// Get checks the request and returns the bundle's stream: the archive is
// written as the response reads it, file by file from the node.
func (r *SupportBundleREST) Get(ctx context.Context, name string, options runtime.Object) (runtime.Object, error) {
	subresource := r.row.Subresource
	if err := refuseDryRun(options.(*ichor.DownloadOptions).DryRun); err != nil {
		return nil, err
	}
	m, user, err := r.machineFor(ctx, name, subresource)
	if err != nil {
		return nil, err
	}
	return &download{
		deps: &r.Deps, user: user, object: reference("TalosMachine", m), contentType: r.row.ContentType,
		what: fmt.Sprintf("the %s of TalosMachine %s", subresource, m.Name),
		open: func(ctx context.Context) (*opened, error) {
			node, credential, err := r.session(ctx, m, v1alpha1.PurposeSupportBundle)
			if err != nil {
				return nil, err
			}
			// The bundle writes what it cannot read into errors.txt, so a
			// node that does not answer at all is refused here instead, as
			// an API error rather than a zip of errors.
			if _, err := node.Status(ctx); err != nil {
				_ = node.Close()
				return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("support bundle of TalosMachine %s: the node does not answer: %v", name, err))
			}
			bundleCtx, cancel := context.WithCancel(ctx)
			pr, pw := io.Pipe()
			done := make(chan struct{})
			go func() {
				defer close(done)
				pw.CloseWithError(node.SupportBundle(bundleCtx, pw))
			}()
			// Closing the body ends the writer (its next write fails, and
			// its node calls are cancelled); the session closes once the
			// writer is done with it.
			return &opened{body: pr, release: func() { cancel(); <-done; _ = node.Close() }, credential: credential}, nil
		},
	}, nil
}
