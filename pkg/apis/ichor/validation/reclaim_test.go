package validation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// validReclaim is an internal MachineReclaim of a machine Ichor manages in
// another namespace, with the v1alpha1 defaults filled in by hand.
func validReclaim() *ichor.MachineReclaim {
	return &ichor.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Name: "take-node-7", Namespace: "team-a", ResourceVersion: "1"},
		Spec: ichor.MachineReclaimSpec{
			MachineRef:  &ichor.MachineReference{Namespace: "team-b", Name: "node-7"},
			ClusterName: "prod",
			Role:        ichor.MachineRoleWorker,
		},
	}
}

// unmanagedReclaim reclaims a Talos node Ichor does not manage.
func unmanagedReclaim() *ichor.MachineReclaim {
	r := validReclaim()
	r.Spec.MachineRef = nil
	r.Spec.Wipe, r.Spec.Graceful = ichor.WipeModeAll, ptr(true)
	r.Spec.Unmanaged = &ichor.UnmanagedMachine{
		Address:              "10.9.0.7:50000",
		TalosconfigSecretRef: ichor.SecretKeySelector{Name: "old-talosconfig", Key: "talosconfig"},
	}
	return r
}

func TestValidateMachineReclaim(t *testing.T) {
	cases := []struct {
		name    string
		reclaim func() *ichor.MachineReclaim
		mutate  func(s *ichor.MachineReclaimSpec)
		want    []fe
	}{
		{name: "valid managed machine"},
		{name: "valid unmanaged machine", reclaim: unmanagedReclaim},
		{
			name:    "valid control plane, system disk only, not graceful",
			reclaim: unmanagedReclaim,
			mutate: func(s *ichor.MachineReclaimSpec) {
				s.Role = ichor.MachineRoleControlPlane
				s.Wipe = ichor.WipeModeSystemDisk
				s.Graceful = ptr(false)
			},
		},
		{
			name: "managed machine with wipe options: its deletion's reset decides",
			mutate: func(s *ichor.MachineReclaimSpec) {
				s.Wipe = ichor.WipeModeSystemDisk
				s.Graceful = ptr(true)
			},
			want: []fe{forbidden("spec.wipe"), forbidden("spec.graceful")},
		},
		{
			name:    "unmanaged with user-disks, which would keep it in its cluster",
			reclaim: unmanagedReclaim,
			mutate:  func(s *ichor.MachineReclaimSpec) { s.Wipe = ichor.WipeModeUserDisks },
			want:    []fe{invalid("spec.wipe")},
		},
		{
			name:   "neither machineRef nor unmanaged",
			mutate: func(s *ichor.MachineReclaimSpec) { s.MachineRef = nil },
			want:   []fe{required("spec")},
		},
		{
			name:    "both machineRef and unmanaged",
			reclaim: unmanagedReclaim,
			mutate: func(s *ichor.MachineReclaimSpec) {
				s.MachineRef = &ichor.MachineReference{Namespace: "team-b", Name: "node-7"}
			},
			want: []fe{forbidden("spec.unmanaged")},
		},
		{
			name:   "machineRef without namespace",
			mutate: func(s *ichor.MachineReclaimSpec) { s.MachineRef.Namespace = "" },
			want:   []fe{required("spec.machineRef.namespace")},
		},
		{
			name:   "machineRef with bad namespace",
			mutate: func(s *ichor.MachineReclaimSpec) { s.MachineRef.Namespace = "team.b" },
			want:   []fe{invalid("spec.machineRef.namespace")},
		},
		{
			name:   "machineRef without name",
			mutate: func(s *ichor.MachineReclaimSpec) { s.MachineRef.Name = "" },
			want:   []fe{required("spec.machineRef.name")},
		},
		{
			name:    "unmanaged address without port",
			reclaim: unmanagedReclaim,
			mutate:  func(s *ichor.MachineReclaimSpec) { s.Unmanaged.Address = "10.9.0.7" },
			want:    []fe{invalid("spec.unmanaged.address")},
		},
		{
			name:    "unmanaged address missing",
			reclaim: unmanagedReclaim,
			mutate:  func(s *ichor.MachineReclaimSpec) { s.Unmanaged.Address = "" },
			want:    []fe{required("spec.unmanaged.address")},
		},
		{
			name:    "unmanaged talosconfig reference empty",
			reclaim: unmanagedReclaim,
			mutate:  func(s *ichor.MachineReclaimSpec) { s.Unmanaged.TalosconfigSecretRef = ichor.SecretKeySelector{} },
			want: []fe{
				required("spec.unmanaged.talosconfigSecretRef.name"),
				required("spec.unmanaged.talosconfigSecretRef.key"),
			},
		},
		{
			name:    "unmanaged talosconfig key invalid",
			reclaim: unmanagedReclaim,
			mutate:  func(s *ichor.MachineReclaimSpec) { s.Unmanaged.TalosconfigSecretRef.Key = "../talosconfig" },
			want:    []fe{invalid("spec.unmanaged.talosconfigSecretRef.key")},
		},
		{
			name:   "cluster name missing",
			mutate: func(s *ichor.MachineReclaimSpec) { s.ClusterName = "" },
			want:   []fe{required("spec.clusterName")},
		},
		{
			name:    "role and wipe missing (not defaulted)",
			reclaim: unmanagedReclaim,
			mutate:  func(s *ichor.MachineReclaimSpec) { s.Role = ""; s.Wipe = "" },
			want:    []fe{required("spec.role"), required("spec.wipe")},
		},
		{
			name:    "role and wipe unknown",
			reclaim: unmanagedReclaim,
			mutate:  func(s *ichor.MachineReclaimSpec) { s.Role = "master"; s.Wipe = "everything" },
			want:    []fe{notSupported("spec.role"), notSupported("spec.wipe")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mk := tc.reclaim
			if mk == nil {
				mk = validReclaim
			}
			r := mk()
			if tc.mutate != nil {
				tc.mutate(&r.Spec)
			}
			expectErrors(t, ValidateMachineReclaim(r), tc.want...)
		})
	}
}

// TestValidateMachineReclaimDefaulted checks that the defaults (worker, wipe
// all, graceful, port 50000) turn the smallest reclaim into a valid one.
func TestValidateMachineReclaimDefaulted(t *testing.T) {
	in := &v1alpha1.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Name: "take-old-node", Namespace: "team-a"},
		Spec: v1alpha1.MachineReclaimSpec{
			Unmanaged: &v1alpha1.UnmanagedMachine{
				Address:              "old-node.example.com",
				TalosconfigSecretRef: v1alpha1.SecretKeySelector{Name: "old-talosconfig", Key: "talosconfig"},
			},
			ClusterName: "prod",
		},
	}
	out := &ichor.MachineReclaim{}
	defaultedInternal(t, in, out)
	s := out.Spec
	if s.Role != ichor.MachineRoleWorker || s.Wipe != ichor.WipeModeAll || s.Graceful == nil || !*s.Graceful ||
		s.Unmanaged.Address != "old-node.example.com:50000" {
		t.Fatalf("unexpected defaults: %+v, unmanaged %+v", s, s.Unmanaged)
	}
	expectErrors(t, ValidateMachineReclaim(out))
}

func TestValidateMachineReclaimUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(r *ichor.MachineReclaim)
		want   []fe
	}{
		{name: "unchanged", mutate: func(r *ichor.MachineReclaim) {}},
		{
			name:   "same graceful value in a new pointer",
			mutate: func(r *ichor.MachineReclaim) { r.Spec.Graceful = ptr(true) },
		},
		{
			name:   "role changed",
			mutate: func(r *ichor.MachineReclaim) { r.Spec.Role = ichor.MachineRoleControlPlane },
			want:   []fe{invalid("spec")},
		},
		{
			name:   "annotations may change",
			mutate: func(r *ichor.MachineReclaim) { r.Annotations = map[string]string{"note": "approved by bob"} },
		},
		{
			name:   "wipe changed",
			mutate: func(r *ichor.MachineReclaim) { r.Spec.Wipe = ichor.WipeModeUserDisks },
			want:   []fe{invalid("spec")},
		},
		{
			name:   "graceful turned off",
			mutate: func(r *ichor.MachineReclaim) { r.Spec.Graceful = ptr(false) },
			want:   []fe{invalid("spec")},
		},
		{
			name:   "another machine",
			mutate: func(r *ichor.MachineReclaim) { r.Spec.Unmanaged.Address = "10.9.0.8:50000" },
			want:   []fe{invalid("spec")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := unmanagedReclaim()
			r := old.DeepCopy()
			tc.mutate(r)
			expectErrors(t, ValidateMachineReclaimUpdate(r, old), tc.want...)
		})
	}
}

func TestValidateMachineReclaimStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *ichor.MachineReclaimStatus)
		want   []fe
	}{
		{name: "empty status", mutate: func(s *ichor.MachineReclaimStatus) {}},
		{
			name: "full status",
			mutate: func(s *ichor.MachineReclaimStatus) {
				s.Phase = ichor.ReclaimJoining
				s.ObservedGeneration = 1
				s.ReclaimedBy = "alice"
				s.StartedAt = &fixedTime
				s.Conditions = []metav1.Condition{goodCondition("Reset")}
			},
		},
		{
			name:   "unknown phase",
			mutate: func(s *ichor.MachineReclaimStatus) { s.Phase = "Stolen" },
			want:   []fe{notSupported("status.phase")},
		},
	}
	for _, bc := range badConditionCases {
		cond := bc.conditions
		cases = append(cases, struct {
			name   string
			mutate func(s *ichor.MachineReclaimStatus)
			want   []fe
		}{bc.name, func(s *ichor.MachineReclaimStatus) { s.Conditions = cond }, bc.want("status.conditions")})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validReclaim()
			r := old.DeepCopy()
			tc.mutate(&r.Status)
			expectErrors(t, ValidateMachineReclaimStatusUpdate(r, old), tc.want...)
		})
	}
}
