package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/scheme"
)

// printer prints the objects an action returns as -o asks (json, yaml,
// name, …), or "kind/name <done>".
type printer struct{ flags *genericclioptions.PrintFlags }

func newPrinter(cmd *cobra.Command, done string) *printer {
	p := &printer{flags: genericclioptions.NewPrintFlags(done).WithTypeSetter(scheme.Scheme)}
	p.flags.AddFlags(cmd)
	return p
}

func (p *printer) print(o *Options, obj runtime.Object) error {
	pr, err := p.flags.ToPrinter()
	if err != nil {
		return err
	}
	return pr.PrintObj(obj, o.Out)
}

func newApprove(o *Options, approve bool) *cobra.Command {
	var reason string
	use, short, done, decision := "approve MACHINE...", "Approve discovered machines, so that Ichor configures them", "approved", v1alpha1.ApprovalApproved
	example := `  # approve two workers (operators may; a control plane, or a machine joining a
  # bootstrapped cluster, needs an admin)
  ichor -n demo approve m4 m5`
	if !approve {
		use, short, done, decision = "reject MACHINE...", "Reject discovered machines: Ichor never sends them anything", "rejected", v1alpha1.ApprovalRejected
		example = `  ichor -n demo reject m9 --reason "not one of ours: unknown serial number"`
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Example: example, GroupID: "machines",
		Args: cobra.MinimumNArgs(1),
	}
	p := newPrinter(cmd, done)
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with your name (required to reject)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !approve && strings.TrimSpace(reason) == "" {
			return fmt.Errorf("a rejection needs a reason: --reason")
		}
		c, ns, err := o.clientIn()
		if err != nil {
			return err
		}
		body, err := json.Marshal(map[string]any{"status": map[string]any{"approval": map[string]any{"decision": decision, "reason": reason}}})
		if err != nil {
			return err
		}
		for _, name := range args {
			m, err := c.IchorV1alpha1().TalosMachines(ns).Patch(cmd.Context(), name, types.MergePatchType, body, metav1.PatchOptions{}, "approval")
			if err != nil {
				return err
			}
			if err := p.print(o, m); err != nil {
				return err
			}
		}
		return nil
	}
	return cmd
}

func newStart(o *Options) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "start OPERATION",
		Short: "Start a pending TalosOperation (the start verb on talosoperations/<its type>)",
		Long: `start runs a TalosOperation created Pending. It needs the start verb on
talosoperations/<its type>. Operators start the routine types; admins start every type:
` + operationTypesHelp(),
		Example: `  # create an operation, then start it and follow it to its end
  kubectl -n demo apply -f upgrade.yaml
  ichor -n demo start upgrade-1-13-1 --wait`,
		GroupID:           "operations",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completePendingOperations,
	}
	p := newPrinter(cmd, "started")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the operation to its end, as ichor wait does")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, ns, err := o.clientIn()
		if err != nil {
			return err
		}
		op, err := c.IchorV1alpha1().TalosOperations(ns).Start(cmd.Context(), args[0], &v1alpha1.TalosOperation{}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if err := p.print(o, op); err != nil {
			return err
		}
		if wait {
			return waitOperation(cmd.Context(), o, c, ns, args[0], 0)
		}
		return nil
	}
	return cmd
}

// operationTypesHelp is a line per operation type: who starts it and what
// it does.
func operationTypesHelp() string {
	var b strings.Builder
	for _, d := range ichor.Operations {
		fmt.Fprintf(&b, "\n  %-19s %-9s %s", d.Type, d.Role+"s", d.Doc)
	}
	return b.String()
}

// completePendingOperations offers the TalosOperations of the namespace
// nobody started yet, each with its type.
func (o *Options) completePendingOperations(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, ns, err := o.clientIn()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	list, err := c.IchorV1alpha1().TalosOperations(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, op := range list.Items {
		if op.Status.StartedBy == "" && (op.Status.Phase == "" || op.Status.Phase == v1alpha1.OperationPending) {
			names = append(names, op.Name+"\t"+string(op.Spec.Type))
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// overrideKinds are the kinds an override is asked on, by the names
// kubectl takes for them.
var overrideKinds = map[string]string{
	"taloscluster": "talosclusters", "talosclusters": "talosclusters", "tc": "talosclusters",
	"talosmachine": "talosmachines", "talosmachines": "talosmachines", "tm": "talosmachines",
	"talosconfigpatch": "talosconfigpatches", "talosconfigpatches": "talosconfigpatches", "tcp": "talosconfigpatches",
}

func newOverride(o *Options) *cobra.Command {
	var check, reason string
	cmd := &cobra.Command{
		Use:   "override KIND/NAME --check CHECK --reason REASON",
		Short: "Let the next change of an object past one safety check (admins; a Warning Event names you)",
		Long: `override lets the next change of a TalosCluster, TalosMachine or TalosConfigPatch go past one
safety check, with the override verb. The checks: ControlPlaneQuorum (deleting a control plane
etcd needs; talosmachine), PatchSecrets (a patch touching the secrets bundle; talosconfigpatch),
BootstrapWaitsForControlPlanes and ClusterHealth (taloscluster).`,
		Example: `  ichor -n demo override talosmachine/m1 --check ControlPlaneQuorum --reason "m1 is gone for good"
  ichor -n demo override taloscluster/demo --check ClusterHealth --reason "m4's disk died; reboot the rest"`,
		GroupID: "operations",
		Args:    cobra.ExactArgs(1),
	}
	p := newPrinter(cmd, "overridden")
	cmd.Flags().StringVar(&check, "check", "", "the safety check to go past")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with your name")
	_ = cmd.MarkFlagRequired("check")
	_ = cmd.MarkFlagRequired("reason")
	_ = cmd.RegisterFlagCompletionFunc("check", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{string(v1alpha1.CheckControlPlaneQuorum), string(v1alpha1.CheckPatchSecrets),
			string(v1alpha1.CheckBootstrapWaitsForControlPlanes), string(v1alpha1.CheckClusterHealth), string(v1alpha1.CheckTalosDowngrade)}, cobra.ShellCompDirectiveNoFileComp
	})
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind, name, ok := strings.Cut(args[0], "/")
		resource := overrideKinds[strings.ToLower(kind)]
		if !ok || name == "" || resource == "" {
			return fmt.Errorf("%q: name the object as KIND/NAME, KIND one of taloscluster, talosmachine, talosconfigpatch", args[0])
		}
		c, ns, err := o.clientIn()
		if err != nil {
			return err
		}
		ov := &v1alpha1.Override{Check: v1alpha1.SafetyCheck(check), Reason: reason}
		var obj runtime.Object
		ctx := cmd.Context()
		switch resource {
		case "talosclusters":
			obj, err = c.IchorV1alpha1().TalosClusters(ns).Override(ctx, name, ov, metav1.CreateOptions{})
		case "talosmachines":
			obj, err = c.IchorV1alpha1().TalosMachines(ns).Override(ctx, name, ov, metav1.CreateOptions{})
		default:
			obj, err = c.IchorV1alpha1().TalosConfigPatches(ns).Override(ctx, name, ov, metav1.CreateOptions{})
		}
		if err != nil {
			return err
		}
		return p.print(o, obj)
	}
	return cmd
}

func newReclaim(o *Options) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "reclaim MACHINERECLAIM",
		Short: "Start a MachineReclaim (the reclaim verb: admins, or whoever holds ichor-machine-reclaimer)",
		Example: `  # reset a machine of another cluster and take it in, following it to its end
  kubectl -n demo apply -f reclaim-m5.yaml
  ichor -n demo reclaim m5 --wait`,
		GroupID: "machines",
		Args:    cobra.ExactArgs(1),
	}
	p := newPrinter(cmd, "reclaim started")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the reclaim to its end, as ichor wait does")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, ns, err := o.clientIn()
		if err != nil {
			return err
		}
		r, err := c.IchorV1alpha1().MachineReclaims(ns).Reclaim(cmd.Context(), args[0], &v1alpha1.MachineReclaim{}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if err := p.print(o, r); err != nil {
			return err
		}
		if wait {
			return waitReclaim(cmd.Context(), o, c, ns, args[0], 0)
		}
		return nil
	}
	return cmd
}
