package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// validPatch is an internal cluster-wide TalosConfigPatch (the kind has no defaults).
func validPatch() *ichor.TalosConfigPatch {
	return &ichor.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Name: "ntp", Namespace: "team-a", ResourceVersion: "1"},
		Spec: ichor.TalosConfigPatchSpec{
			ClusterName: "prod",
			Patch:       "machine:\n  time:\n    servers:\n      - time.cloudflare.com\n",
		},
	}
}

func TestValidateTalosConfigPatch(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(p *ichor.TalosConfigPatch)
		want   []fe
	}{
		{name: "valid cluster-wide", mutate: func(p *ichor.TalosConfigPatch) {}},
		{
			name:   "valid role target",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Target.Role = ichor.MachineRoleControlPlane },
		},
		{
			name:   "valid machines target",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Target.Machines = []string{"node-1", "node-2"} },
		},
		{
			name: "valid selector target",
			mutate: func(p *ichor.TalosConfigPatch) {
				p.Spec.Target.Selector = &metav1.LabelSelector{
					MatchLabels: map[string]string{"ichor.dev/pool": "gpu"},
					MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
					},
				}
			},
		},
		{
			name: "empty machines list is no target",
			mutate: func(p *ichor.TalosConfigPatch) {
				p.Spec.Target.Machines = []string{}
				p.Spec.Target.Role = ichor.MachineRoleWorker
			},
		},
		{
			name: "valid multi-document patch with priority and disabled",
			mutate: func(p *ichor.TalosConfigPatch) {
				p.Spec.Patch = "---\nmachine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n---\napiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: tailscale\n"
				p.Spec.Priority = -10
				p.Spec.Disabled = true
			},
		},
		{
			name:   "bad metadata",
			mutate: func(p *ichor.TalosConfigPatch) { p.Name = "NTP"; p.Namespace = "" },
			want:   []fe{invalid("metadata.name"), required("metadata.namespace")},
		},
		{
			name:   "cluster name missing",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.ClusterName = "" },
			want:   []fe{required("spec.clusterName")},
		},
		{
			name:   "cluster name invalid",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.ClusterName = "prod cluster" },
			want:   []fe{invalid("spec.clusterName")},
		},
		{
			name:   "patch missing",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Patch = "" },
			want:   []fe{required("spec.patch")},
		},
		{
			name:   "patch only whitespace",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Patch = "  \n\t\n" },
			want:   []fe{required("spec.patch")},
		},
		{
			name:   "patch is a list, not a mapping",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Patch = "- op: add\n  path: /machine/network\n  value: {}\n" },
			want:   []fe{invalid("spec.patch")},
		},
		{
			name:   "patch is a scalar",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Patch = "just words" },
			want:   []fe{invalid("spec.patch")},
		},
		{
			name:   "second document is a list",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Patch = "machine: {}\n---\n- a\n- b\n" },
			want:   []fe{invalid("spec.patch")},
		},
		{
			name:   "patch is an empty mapping",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Patch = "{}" },
			want:   []fe{invalid("spec.patch")},
		},
		{
			name:   "patch is only comments",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Patch = "# nothing yet\n" },
			want:   []fe{invalid("spec.patch")},
		},
		{
			name:   "patch is only separators",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Patch = "---\n---\n" },
			want:   []fe{invalid("spec.patch")},
		},
		{
			name:   "patch is not YAML",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Patch = "machine: [unclosed\n" },
			want:   []fe{invalid("spec.patch")},
		},
		{
			name:   "patch too long",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Patch = "a: " + strings.Repeat("x", maxPatchBytes) },
			want:   []fe{tooLong("spec.patch")},
		},
		{
			name: "role and machines",
			mutate: func(p *ichor.TalosConfigPatch) {
				p.Spec.Target.Role = ichor.MachineRoleWorker
				p.Spec.Target.Machines = []string{"node-1"}
			},
			want: []fe{forbidden("spec.target")},
		},
		{
			name: "machines and selector",
			mutate: func(p *ichor.TalosConfigPatch) {
				p.Spec.Target.Machines = []string{"node-1"}
				p.Spec.Target.Selector = &metav1.LabelSelector{}
			},
			want: []fe{forbidden("spec.target")},
		},
		{
			name: "all three targets, one of them bad",
			mutate: func(p *ichor.TalosConfigPatch) {
				p.Spec.Target.Role = "master"
				p.Spec.Target.Machines = []string{"node-1"}
				p.Spec.Target.Selector = &metav1.LabelSelector{}
			},
			want: []fe{forbidden("spec.target"), notSupported("spec.target.role")},
		},
		{
			name:   "unknown role",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Target.Role = "master" },
			want:   []fe{notSupported("spec.target.role")},
		},
		{
			name:   "machines repeated or invalid",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Target.Machines = []string{"Node-1", "node-2", "node-2", ""} },
			want:   []fe{invalid("spec.target.machines[0]"), duplicate("spec.target.machines[2]"), required("spec.target.machines[3]")},
		},
		{
			name: "selector with a bad label key",
			mutate: func(p *ichor.TalosConfigPatch) {
				p.Spec.Target.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}
			},
			want: []fe{invalid("spec.target.selector.matchLabels")},
		},
		{
			name: "selector with a bad operator",
			mutate: func(p *ichor.TalosConfigPatch) {
				p.Spec.Target.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "zone", Operator: "Near", Values: []string{"a"}},
				}}
			},
			want: []fe{invalid("spec.target.selector.matchExpressions[0].operator")},
		},
		{
			name: "selector In without values",
			mutate: func(p *ichor.TalosConfigPatch) {
				p.Spec.Target.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "zone", Operator: metav1.LabelSelectorOpIn},
				}}
			},
			want: []fe{required("spec.target.selector.matchExpressions[0].values")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := validPatch()
			tc.mutate(p)
			expectErrors(t, ValidateTalosConfigPatch(p), tc.want...)
		})
	}
}

func TestValidateTalosConfigPatchUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(p *ichor.TalosConfigPatch)
		want   []fe
	}{
		{name: "unchanged", mutate: func(p *ichor.TalosConfigPatch) {}},
		{
			name: "retarget, reprioritise, rewrite and disable",
			mutate: func(p *ichor.TalosConfigPatch) {
				p.Spec.Target.Role = ichor.MachineRoleWorker
				p.Spec.Priority = 5
				p.Spec.Patch = "machine:\n  install:\n    wipe: false\n"
				p.Spec.Disabled = true
			},
		},
		{
			name:   "moving to another cluster",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.ClusterName = "staging" },
			want:   []fe{invalid("spec.clusterName")},
		},
		{
			name:   "spec is still validated",
			mutate: func(p *ichor.TalosConfigPatch) { p.Spec.Patch = "- a" },
			want:   []fe{invalid("spec.patch")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validPatch()
			p := old.DeepCopy()
			tc.mutate(p)
			expectErrors(t, ValidateTalosConfigPatchUpdate(p, old), tc.want...)
		})
	}
}

func TestValidateTalosConfigPatchStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *ichor.TalosConfigPatchStatus)
		want   []fe
	}{
		{name: "empty status", mutate: func(s *ichor.TalosConfigPatchStatus) {}},
		{
			name: "full status",
			mutate: func(s *ichor.TalosConfigPatchStatus) {
				s.ObservedGeneration = 4
				s.Conditions = []metav1.Condition{goodCondition("Valid"), goodCondition("Applied")}
				s.Effect = ichor.ConfigEffectAPIServerRestart
				s.AppliedMachines = []string{"node-1", "node-2"}
			},
		},
		{
			name:   "unknown effect",
			mutate: func(s *ichor.TalosConfigPatchStatus) { s.Effect = "Explode" },
			want:   []fe{notSupported("status.effect")},
		},
		{
			name:   "applied machines repeated",
			mutate: func(s *ichor.TalosConfigPatchStatus) { s.AppliedMachines = []string{"node-1", "node-1"} },
			want:   []fe{duplicate("status.appliedMachines[1]")},
		},
	}
	for _, bc := range badConditionCases {
		cond := bc.conditions
		cases = append(cases, struct {
			name   string
			mutate func(s *ichor.TalosConfigPatchStatus)
			want   []fe
		}{bc.name, func(s *ichor.TalosConfigPatchStatus) { s.Conditions = cond }, bc.want("status.conditions")})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validPatch()
			p := old.DeepCopy()
			tc.mutate(&p.Status)
			expectErrors(t, ValidateTalosConfigPatchStatusUpdate(p, old), tc.want...)
		})
	}
}
