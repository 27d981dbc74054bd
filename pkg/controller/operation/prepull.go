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
// installer while the node in flight reboots (a batch of maxUnavailable, if
// that is more).
const prepullAhead = 2

// prepulls pulls the installer on the next nodes of a talos-upgrade while
// the node in flight is away. Pulling is the longest part of a real node's
// step and disrupts nothing, so done ahead it overlaps the reboots instead
// of adding to them. Nothing is recorded: each step still pulls before it
// upgrades, which finds the image there (ImageService.Pull of an image the
// node has is quick), so a pre-pull lost with a restart costs only time.
type prepulls struct {
	mu  sync.Mutex
	ops map[types.UID]*opPrepulls
	wg  sync.WaitGroup // the pulls in flight
}

// opPrepulls is what one operation began: the machines, and how to cancel
// their pulls once it ends.
type opPrepulls struct {
	began  map[string]bool
	ctx    context.Context
	cancel context.CancelFunc
}

// next starts, in the background, the pulls of the next Pending steps of s's
// operation that have not begun one, while the node of s, the Running step,
// is away. Nothing starts for an operation that stops: deleted, or with a
// failed step.
func (p *prepulls) next(ctx context.Context, s *step) {
	op := s.x.op
	if !op.DeletionTimestamp.IsZero() || op.Spec.TalosUpgrade == nil ||
		stepFailed(op) {
		return
	}
	ahead := prepullAhead
	if n := op.Spec.MaxUnavailable; n != nil && int(*n) > ahead {
		ahead = int(*n)
	}
	var names []string
	for _, rec := range op.Status.Steps[s.i+1:] {
		if len(names) == ahead {
			break
		}
		if rec.Phase == v1alpha1.OperationPending {
			names = append(names, rec.Machine)
		}
	}

	p.mu.Lock()
	if p.ops == nil {
		p.ops = map[types.UID]*opPrepulls{}
	}
	o := p.ops[op.UID]
	if o == nil {
		// The pulls outlive the reconcile that starts them: they end with
		// their operation (forget), or at shutdown, with ctx.
		octx, cancel := context.WithCancel(ctx)
		o = &opPrepulls{began: map[string]bool{}, ctx: octx, cancel: cancel}
		p.ops[op.UID] = o
	}
	var todo []string
	for _, n := range names {
		if !o.began[n] {
			o.began[n] = true
			todo = append(todo, n)
		}
	}
	p.mu.Unlock()

	target, namespace, creds, r := op.Spec.TalosUpgrade.Version, op.Namespace, s.creds, s.r
	for _, name := range todo {
		p.wg.Go(func() {
			ctx, cancel := context.WithTimeout(o.ctx, r.Options.InstallTimeout)
			defer cancel()
			logger := log.FromContext(ctx).WithValues("ahead", name)
			if err := prepull(ctx, r, namespace, name, target, creds); err != nil {
				logger.V(1).Info("Installer not pulled ahead; its step pulls it", "error", err.Error())
				return
			}
			logger.V(1).Info("Installer pulled ahead", "version", target)
		})
	}
}

// forget cancels the pulls an ended operation began, and drops its record.
func (p *prepulls) forget(op types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if o := p.ops[op]; o != nil {
		o.cancel()
		delete(p.ops, op)
	}
}

// wait returns once the pulls begun so far ended.
func (p *prepulls) wait() { p.wg.Wait() }

// stepFailed reports whether a step of op failed: the operation starts no
// other.
func stepFailed(op *v1alpha1.TalosOperation) bool {
	for _, s := range op.Status.Steps {
		if s.Phase == v1alpha1.OperationFailed {
			return true
		}
	}
	return false
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
