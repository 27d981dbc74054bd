package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// recentWarnings is how far back status looks for Warning Events.
const recentWarnings = time.Hour

func newStatus(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [CLUSTER]",
		Short: "Show clusters, their machines, operations and recent warnings as a tree",
		Long: `status shows each TalosCluster of the namespace (or the one named): its phase, versions and
machines ready, the conditions that are not True, every machine (role, phase, address, node,
Talos version), the operations that are not over (or ended in the last hour), and the Warning
Events of the last hour about any of them.`,
		Example: `  ichor -n demo status
  ichor -n demo status demo`,
		GroupID: "operations",
		Args:    cobra.MaximumNArgs(1),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, ns, err := o.clientIn()
		if err != nil {
			return err
		}
		kube, err := o.kube()
		if err != nil {
			return err
		}
		return printStatus(cmd.Context(), o.Out, c, kube, ns, args, time.Now())
	}
	return cmd
}

func printStatus(ctx context.Context, w io.Writer, c versioned.Interface, kube kubernetes.Interface, ns string, names []string, now time.Time) error {
	var clusters []v1alpha1.TalosCluster
	if len(names) == 1 {
		tc, err := c.IchorV1alpha1().TalosClusters(ns).Get(ctx, names[0], metav1.GetOptions{})
		if err != nil {
			return err
		}
		clusters = append(clusters, *tc)
	} else {
		list, err := c.IchorV1alpha1().TalosClusters(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		clusters = list.Items
		if len(clusters) == 0 {
			fmt.Fprintf(w, "No TalosClusters in namespace %s.\n", ns)
			return nil
		}
	}
	machines, err := c.IchorV1alpha1().TalosMachines(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ops, err := c.IchorV1alpha1().TalosOperations(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	events, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=" + corev1.EventTypeWarning})
	if err != nil {
		events = nil // a viewer may not read Events: the rest still shows
	}
	for i, tc := range clusters {
		if i > 0 {
			fmt.Fprintln(w)
		}
		printCluster(w, &tc, machines.Items, ops.Items, events, now)
	}
	return nil
}

func printCluster(w io.Writer, tc *v1alpha1.TalosCluster, machines []v1alpha1.TalosMachine, ops []v1alpha1.TalosOperation, events *corev1.EventList, now time.Time) {
	fmt.Fprintf(w, "%s  %s  Talos %s  Kubernetes %s  %d/%d machines ready\n", tc.Name, cmp.Or(string(tc.Status.Phase), "Pending"),
		cmp.Or(tc.Status.TalosVersion, tc.Spec.TalosVersion), cmp.Or(tc.Status.KubernetesVersion, tc.Spec.KubernetesVersion),
		tc.Status.Machines.Ready, tc.Status.Machines.Total)
	var sections [][]string
	var conds []string
	for _, c := range tc.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			conds = append(conds, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	if tc.Status.Disruption != nil {
		conds = append(conds, fmt.Sprintf("disruption budget held by %s (%s)", tc.Status.Disruption.Machine, tc.Status.Disruption.Action))
	}
	sections = append(sections, append([]string{"Conditions not True"}, orNone(conds)...))

	involved := map[string]bool{"TalosCluster/" + tc.Name: true}
	var ms []string
	for _, m := range machines {
		if m.Spec.ClusterName != tc.Name {
			continue
		}
		involved["TalosMachine/"+m.Name] = true
		ms = append(ms, fmt.Sprintf("%-16s %-12s %-16s %-22s %-16s %s", m.Name, m.Spec.Role, cmp.Or(string(m.Status.Phase), "-"),
			m.Spec.Address, cmp.Or(m.Status.NodeName, "-"), cmp.Or(m.Status.TalosVersion, "-")))
	}
	sections = append(sections, append([]string{"Machines"}, orNone(ms)...))

	var os []string
	for _, op := range ops {
		if op.Spec.ClusterName != tc.Name {
			continue
		}
		over := op.Status.Phase == v1alpha1.OperationSucceeded || op.Status.Phase == v1alpha1.OperationFailed
		if over && (op.Status.CompletedAt == nil || now.Sub(op.Status.CompletedAt.Time) > recentWarnings) {
			continue
		}
		involved["TalosOperation/"+op.Name] = true
		done, inFlight := 0, ""
		for _, s := range op.Status.Steps {
			switch s.Phase {
			case v1alpha1.OperationSucceeded:
				done++
			case v1alpha1.OperationRunning:
				inFlight = s.Name()
			}
		}
		os = append(os, fmt.Sprintf("%-24s %-18s %-9s %d/%d  %s", op.Name, op.Spec.Type, cmp.Or(string(op.Status.Phase), "Created"),
			done, len(op.Status.Steps), inFlight))
	}
	sections = append(sections, append([]string{"Operations"}, orNone(os)...))

	if b := tc.Spec.Backup; b != nil {
		line := fmt.Sprintf("schedule %q (%s)", b.Schedule, cmp.Or(b.TimeZone, "UTC"))
		if b.Suspend {
			line += ", suspended"
		}
		lines := []string{line}
		if st := tc.Status.Backup; st != nil && st.LastSuccessfulTime != nil {
			lines = append(lines, fmt.Sprintf("last success %s, %s ago", st.LastSuccessfulBackup, duration.HumanDuration(now.Sub(st.LastSuccessfulTime.Time))))
		} else {
			lines = append(lines, "no successful backup yet")
		}
		sections = append(sections, append([]string{"Backups"}, lines...))
	}

	var warns []string
	if events != nil {
		items := slices.Clone(events.Items)
		slices.SortFunc(items, func(a, b corev1.Event) int { return eventTime(b).Compare(eventTime(a)) })
		for _, e := range items {
			at := eventTime(e)
			if !involved[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name] || now.Sub(at) > recentWarnings {
				continue
			}
			warns = append(warns, fmt.Sprintf("%s ago  %s/%s  %s: %s", duration.HumanDuration(now.Sub(at)), e.InvolvedObject.Kind,
				e.InvolvedObject.Name, e.Reason, strings.TrimSpace(e.Message)))
		}
	}
	sections = append(sections, append([]string{"Warnings (last hour)"}, orNone(warns)...))

	for i, s := range sections {
		branch, indent := "├─ ", "│  "
		if i == len(sections)-1 {
			branch, indent = "└─ ", "   "
		}
		fmt.Fprintln(w, branch+s[0])
		for j, line := range s[1:] {
			leaf := "├─ "
			if j == len(s)-2 {
				leaf = "└─ "
			}
			fmt.Fprintln(w, indent+leaf+line)
		}
	}
}

func orNone(lines []string) []string {
	if len(lines) == 0 {
		return []string{"(none)"}
	}
	return lines
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
