package operation

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
)

// prepullAhead is how many of the next nodes of a talos-upgrade pull their
// installer while the node in flight reboots.
const prepullAhead = 2

// prepulls pulls the installer on the next nodes of a talos-upgrade while
// the node in flight is away. Pulling is the longest part of a real node's
// step and disrupts nothing, so done ahead it overlaps the reboots instead
// of adding to them. Nothing is recorded: each step still pulls before it
// upgrades, which finds the image there (ImageService.Pull of an image the
// node has is quick), so a pre-pull lost with a restart costs only time.
type prepulls struct {
	mu    sync.Mutex
	began map[types.UID]map[string]bool // operation UID -> machines
	wg    sync.WaitGroup                // the pulls in flight
}

// next starts, in the background, the pulls of the next Pending steps of s's
// operation that have not begun one, for the node of the Running step s.
func (p *prepulls) next(ctx context.Context, s *step) {
	op := s.x.op
	var names []string
	for _, rec := range op.Status.Steps[s.i+1:] {
		if len(names) == prepullAhead {
			break
		}
		if rec.Phase == v1alpha1.OperationPending {
			names = append(names, rec.Machine)
		}
	}
	p.mu.Lock()
	if p.began == nil {
		p.began = map[types.UID]map[string]bool{}
	}
	if p.began[op.UID] == nil {
		p.began[op.UID] = map[string]bool{}
	}
	var todo []string
	for _, n := range names {
		if !p.began[op.UID][n] {
			p.began[op.UID][n] = true
			todo = append(todo, n)
		}
	}
	p.mu.Unlock()

	target, namespace, creds, r := op.Spec.TalosUpgrade.Version, op.Namespace, s.creds, s.r
	for _, name := range todo {
		p.wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, r.Options.InstallTimeout)
			defer cancel()
			logger := log.FromContext(ctx).WithValues("machine", name)
			if err := prepull(ctx, r, namespace, name, target, creds); err != nil {
				logger.V(1).Info("Installer not pulled ahead; its step pulls it", "error", err.Error())
				return
			}
			logger.V(1).Info("Installer pulled ahead", "version", target)
		})
	}
}

// wait returns once the pulls begun so far ended.
func (p *prepulls) wait() { p.wg.Wait() }

// forget drops what an ended operation began.
func (p *prepulls) forget(op types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.began, op)
}

// prepull pulls the installer of target on the node of machine name, as
// its step will: nothing on a node at target already, or one that upgrades
// through the legacy call (which pulls itself).
func prepull(ctx context.Context, r *Reconciler, namespace, name, target string, creds talos.Credentials) error {
	var m v1alpha1.TalosMachine
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &m); err != nil {
		return err
	}
	node, err := r.Dialer.Configured(ctx, m.Spec.Address, creds)
	if err != nil {
		return err
	}
	defer func() { _ = node.Close() }()
	running, err := node.Version(ctx)
	if err != nil || running == target || olderThan(running, lifecycleAPI) {
		return err
	}
	image, err := installerImage(ctx, r, node, target)
	if err != nil {
		return err
	}
	return node.PullImage(ctx, image)
}
