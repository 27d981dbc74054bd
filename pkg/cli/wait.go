package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

func newWait(o *Options) *cobra.Command {
	var (
		condition string
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait talosoperation/NAME | machinereclaim/NAME | taloscluster/NAME --for CONDITION",
		Short: "Wait for an operation or a reclaim to end, or for a cluster's condition to be True",
		Long: `wait follows an object with a watch. For a TalosOperation it prints each step as it starts and
ends, and for a MachineReclaim what it does as that changes; both exit 0 when the object
Succeeded, 1 when it Failed (saying why). For a TalosCluster it exits 0 once the condition given
with --for (Ready, NodesReady, …) is True.`,
		Example: `  ichor -n demo wait talosoperation/upgrade-1-13-1 --timeout 30m
  ichor -n demo wait machinereclaim/worker-6
  ichor -n demo wait taloscluster/demo --for Ready`,
		GroupID: "operations",
		Args:    cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&condition, "for", "", "taloscluster: the condition type to wait for")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: never)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind, name, ok := strings.Cut(args[0], "/")
		if !ok || name == "" {
			return fmt.Errorf("%q: name the object as talosoperation/NAME, machinereclaim/NAME or taloscluster/NAME", args[0])
		}
		c, ns, err := o.clientIn()
		if err != nil {
			return err
		}
		switch strings.ToLower(kind) {
		case "talosoperation", "talosoperations", "top":
			return waitOperation(cmd.Context(), o, c, ns, name, timeout)
		case "machinereclaim", "machinereclaims", "mr":
			return waitReclaim(cmd.Context(), o, c, ns, name, timeout)
		case "taloscluster", "talosclusters", "tc":
			if condition == "" {
				return fmt.Errorf("say which condition of TalosCluster %s to wait for: --for Ready", name)
			}
			return waitCluster(cmd.Context(), o, c, ns, name, condition, timeout)
		}
		return fmt.Errorf("%q: ichor waits for a talosoperation, a machinereclaim or a taloscluster", kind)
	}
	return cmd
}

// until watches the object name (of the list/watch functions given) until
// done says so, from its current state on.
func until(ctx context.Context, timeout time.Duration, name string, obj runtime.Object,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
	done func(runtime.Object) (bool, error),
) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return list(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return watchFn(ctx, opts)
		},
	}
	_, err := watchtools.UntilWithSync(ctx, lw, obj, nil, func(e watch.Event) (bool, error) {
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("%s was deleted", name)
		}
		return done(e.Object)
	})
	if err == watchtools.ErrWatchClosed || ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("gave up waiting for %s after %s", name, timeout)
	}
	return err
}

// waitOperation follows the operation name to its end, printing its steps
// as they move: nil when it Succeeded, an exit code 1 when it Failed.
func waitOperation(ctx context.Context, o *Options, c versioned.Interface, ns, name string, timeout time.Duration) error {
	ops := c.IchorV1alpha1().TalosOperations(ns)
	seen := map[string]v1alpha1.OperationPhase{}
	var result error
	err := until(ctx, timeout, name, &v1alpha1.TalosOperation{},
		func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) { return ops.List(ctx, opts) },
		func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return ops.Watch(ctx, opts)
		},
		func(obj runtime.Object) (bool, error) {
			op, ok := obj.(*v1alpha1.TalosOperation)
			if !ok {
				return false, nil
			}
			done := 0
			for _, s := range op.Status.Steps {
				if s.Phase == v1alpha1.OperationSucceeded {
					done++
				}
			}
			for _, s := range op.Status.Steps {
				if s.Phase == v1alpha1.OperationPending || seen[s.Name()] == s.Phase {
					continue
				}
				seen[s.Name()] = s.Phase
				fmt.Fprintf(o.ErrOut, "%d/%d  %-32s %-9s %s\n", done, len(op.Status.Steps), s.Name(), s.Phase, s.Message)
			}
			switch op.Status.Phase {
			case v1alpha1.OperationSucceeded:
				fmt.Fprintf(o.Out, "talosoperation.ichor.dev/%s Succeeded\n", op.Name)
				return true, nil
			case v1alpha1.OperationFailed:
				msg := "it Failed"
				if c := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.OperationConditionSucceeded); c != nil {
					msg = c.Reason + ": " + c.Message
				}
				result = &exitError{code: 1, msg: fmt.Sprintf("talosoperation.ichor.dev/%s Failed: %s", op.Name, msg)}
				return true, nil
			}
			return false, nil
		})
	if err != nil {
		return err
	}
	return result
}

// waitReclaim follows the reclaim name to its end, printing what it does
// as that changes: nil when it Succeeded, an exit code 1 when it Failed.
func waitReclaim(ctx context.Context, o *Options, c versioned.Interface, ns, name string, timeout time.Duration) error {
	reclaims := c.IchorV1alpha1().MachineReclaims(ns)
	last := ""
	var result error
	err := until(ctx, timeout, name, &v1alpha1.MachineReclaim{},
		func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return reclaims.List(ctx, opts)
		},
		func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return reclaims.Watch(ctx, opts)
		},
		func(obj runtime.Object) (bool, error) {
			r, ok := obj.(*v1alpha1.MachineReclaim)
			if !ok {
				return false, nil
			}
			if c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ReclaimConditionProgressing); c != nil && c.Status == metav1.ConditionTrue {
				if now := string(r.Status.Phase) + c.Message; now != last {
					last = now
					fmt.Fprintf(o.ErrOut, "%-9s %s\n", r.Status.Phase, c.Message)
				}
			}
			switch r.Status.Phase {
			case v1alpha1.ReclaimSucceeded:
				fmt.Fprintf(o.Out, "machinereclaim.ichor.dev/%s Succeeded: TalosMachine %s\n", r.Name, r.Status.MachineName)
				return true, nil
			case v1alpha1.ReclaimFailed:
				msg := "it Failed"
				if c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ReclaimConditionSucceeded); c != nil {
					msg = c.Reason + ": " + c.Message
				}
				result = &exitError{code: 1, msg: fmt.Sprintf("machinereclaim.ichor.dev/%s Failed: %s", r.Name, msg)}
				return true, nil
			}
			return false, nil
		})
	if err != nil {
		return err
	}
	return result
}

// waitCluster waits for condition of the cluster name to be True.
func waitCluster(ctx context.Context, o *Options, c versioned.Interface, ns, name, condition string, timeout time.Duration) error {
	clusters := c.IchorV1alpha1().TalosClusters(ns)
	last := ""
	return until(ctx, timeout, name, &v1alpha1.TalosCluster{},
		func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return clusters.List(ctx, opts)
		},
		func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return clusters.Watch(ctx, opts)
		},
		func(obj runtime.Object) (bool, error) {
			tc, ok := obj.(*v1alpha1.TalosCluster)
			if !ok {
				return false, nil
			}
			cond := meta.FindStatusCondition(tc.Status.Conditions, condition)
			if cond == nil {
				return false, nil
			}
			if now := string(cond.Status) + cond.Reason + cond.Message; now != last {
				last = now
				fmt.Fprintf(o.ErrOut, "%s=%s %s: %s\n", condition, cond.Status, cond.Reason, cond.Message)
			}
			if cond.Status == metav1.ConditionTrue {
				fmt.Fprintf(o.Out, "taloscluster.ichor.dev/%s condition met\n", tc.Name)
				return true, nil
			}
			return false, nil
		})
}
