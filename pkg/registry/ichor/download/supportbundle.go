package download

import (
	"context"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// supportBundle streams GET talosmachines/NAME/support-bundle: a zip
// archive of the node's version, services, logs, kernel log and main
// resources, as os:reader reads them (talos.Node.SupportBundle says what is
// in it). The archive is written as the response reads it, file by file
// from the node.
func supportBundle(_ context.Context, r request[*ichor.TalosMachine, *ichor.DownloadOptions]) (string, opener, error) {
	m := r.object
	what := fmt.Sprintf("the %s of TalosMachine %s", r.row.Subresource, m.Name)
	return what, func(ctx context.Context) (*opened, error) {
		node, credential, err := r.session(ctx, m, v1alpha1.PurposeSupportBundle)
		if err != nil {
			return nil, err
		}
		// The bundle writes what it cannot read into errors.txt, so a
		// node that does not answer at all is refused here instead, as
		// an API error rather than a zip of errors.
		if _, err := node.Status(ctx); err != nil {
			_ = node.Close()
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("support bundle of TalosMachine %s: the node does not answer: %v", m.Name, err))
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
	}, nil
}
