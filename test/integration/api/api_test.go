package api

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/test/integration/itest"
)

func TestAPICRUDEveryKind(t *testing.T) {
	alice := itest.CP.ConfigFor("alice", "ichor:admin")
	cases := []struct {
		kind string
		run  func(t *testing.T)
	}{
		{"TalosCluster", func(t *testing.T) {
			var n itest.APICounter
			itest.APIRunCRUD(t, itest.APICRUDCase[*v1alpha1.TalosCluster, *v1alpha1.TalosClusterList]{
				Namespaced: true,
				Client: func(cs versioned.Interface, ns string) itest.APICRUDClient[*v1alpha1.TalosCluster, *v1alpha1.TalosClusterList] {
					return cs.IchorV1alpha1().TalosClusters(ns)
				},
				Fixture:       func(_ testing.TB, name, ns string) *v1alpha1.TalosCluster { return itest.APITalosCluster(name, ns) },
				SpecMark:      func(o *v1alpha1.TalosCluster) string { return o.Spec.KubernetesVersion },
				MutateSpec:    func(o *v1alpha1.TalosCluster) { o.Spec.KubernetesVersion = fmt.Sprintf("v1.36.%d", 1+n.Next()) },
				StatusMark:    func(o *v1alpha1.TalosCluster) string { return string(o.Status.Phase) },
				SetStatus:     func(o *v1alpha1.TalosCluster) { o.Status.Phase = v1alpha1.ClusterPhaseReady },
				WrittenStatus: "Ready",
			})
		}},
		{"TalosMachine", func(t *testing.T) {
			var n itest.APICounter
			itest.APIRunCRUD(t, itest.APICRUDCase[*v1alpha1.TalosMachine, *v1alpha1.TalosMachineList]{
				Namespaced: true,
				Client: func(cs versioned.Interface, ns string) itest.APICRUDClient[*v1alpha1.TalosMachine, *v1alpha1.TalosMachineList] {
					return cs.IchorV1alpha1().TalosMachines(ns)
				},
				Fixture: func(_ testing.TB, name, ns string) *v1alpha1.TalosMachine {
					return itest.APITalosMachine(name, ns, "alpha")
				},
				AfterCreate: func(t *testing.T, m *v1alpha1.TalosMachine) {
					if m.Spec.Role != v1alpha1.MachineRoleWorker {
						t.Errorf("role of an assigned machine defaults to worker, got %q", m.Spec.Role)
					}
				},
				SpecMark:      func(o *v1alpha1.TalosMachine) string { return o.Spec.Hostname },
				MutateSpec:    func(o *v1alpha1.TalosMachine) { o.Spec.Hostname = fmt.Sprintf("node-%d", n.Next()) },
				StatusMark:    func(o *v1alpha1.TalosMachine) string { return string(o.Status.Phase) },
				SetStatus:     func(o *v1alpha1.TalosMachine) { o.Status.Phase = v1alpha1.MachinePhaseReady },
				WrittenStatus: "Ready",
			})
		}},
		{"TalosConfigPatch", func(t *testing.T) {
			var n itest.APICounter
			itest.APIRunCRUD(t, itest.APICRUDCase[*v1alpha1.TalosConfigPatch, *v1alpha1.TalosConfigPatchList]{
				Namespaced: true,
				Client: func(cs versioned.Interface, ns string) itest.APICRUDClient[*v1alpha1.TalosConfigPatch, *v1alpha1.TalosConfigPatchList] {
					return cs.IchorV1alpha1().TalosConfigPatches(ns)
				},
				Fixture: func(_ testing.TB, name, ns string) *v1alpha1.TalosConfigPatch {
					return itest.APITalosConfigPatch(name, ns)
				},
				SpecMark:      func(o *v1alpha1.TalosConfigPatch) string { return fmt.Sprint(o.Spec.Priority) },
				MutateSpec:    func(o *v1alpha1.TalosConfigPatch) { o.Spec.Priority = int32(10 + n.Next()) },
				StatusMark:    func(o *v1alpha1.TalosConfigPatch) string { return string(o.Status.Effect) },
				SetStatus:     func(o *v1alpha1.TalosConfigPatch) { o.Status.Effect = v1alpha1.ConfigEffectNoReboot },
				WrittenStatus: "NoReboot",
			})
		}},
		{"TalosOperation", func(t *testing.T) {
			itest.APIRunCRUD(t, itest.APICRUDCase[*v1alpha1.TalosOperation, *v1alpha1.TalosOperationList]{
				Namespaced: true,
				Client: func(cs versioned.Interface, ns string) itest.APICRUDClient[*v1alpha1.TalosOperation, *v1alpha1.TalosOperationList] {
					return cs.IchorV1alpha1().TalosOperations(ns)
				},
				Fixture: func(_ testing.TB, name, ns string) *v1alpha1.TalosOperation {
					return itest.APITalosOperation(name, ns, v1alpha1.OperationReboot)
				},
				SpecMark:      func(o *v1alpha1.TalosOperation) string { return string(o.Spec.Type) },
				MutateSpec:    func(o *v1alpha1.TalosOperation) { o.Spec.Type = itest.APIToggle(o.Spec.Type, "reboot", "etcd-defrag") },
				ImmutableSpec: true,
				StatusMark:    func(o *v1alpha1.TalosOperation) string { return string(o.Status.Phase) },
				SetStatus:     func(o *v1alpha1.TalosOperation) { o.Status.Phase = v1alpha1.OperationRunning },
				InitialStatus: "Pending",
				WrittenStatus: "Running",
			})
		}},
		{"TalosCredentialRequest", func(t *testing.T) {
			itest.APIRunCRUD(t, itest.APICRUDCase[*v1alpha1.TalosCredentialRequest, *v1alpha1.TalosCredentialRequestList]{
				Namespaced: true,
				Client: func(cs versioned.Interface, ns string) itest.APICRUDClient[*v1alpha1.TalosCredentialRequest, *v1alpha1.TalosCredentialRequestList] {
					return cs.IchorV1alpha1().TalosCredentialRequests(ns)
				},
				Fixture:  itest.APITalosCredentialRequest,
				CreateAs: alice,
				AfterCreate: func(t *testing.T, r *v1alpha1.TalosCredentialRequest) {
					if r.Spec.Username != "alice" {
						t.Errorf("spec.username = %q, want the caller alice (the body said mallory)", r.Spec.Username)
					}
					if r.Spec.UID != "" {
						t.Errorf("spec.uid = %q, want empty: the caller has no uid and the body's is discarded", r.Spec.UID)
					}
					groups := slices.Sorted(slices.Values(r.Spec.Groups))
					if want := []string{"ichor:admin", "system:authenticated"}; !slices.Equal(groups, want) {
						t.Errorf("spec.groups = %v, want the caller's %v", groups, want)
					}
				},
				SpecMark: func(o *v1alpha1.TalosCredentialRequest) string { return string(o.Spec.Purpose) },
				MutateSpec: func(o *v1alpha1.TalosCredentialRequest) {
					o.Spec.Purpose = itest.APIToggle(o.Spec.Purpose, "talosconfig-reader", "support-bundle")
				},
				ImmutableSpec: true,
				StatusMark:    func(o *v1alpha1.TalosCredentialRequest) string { return o.Status.Role },
				SetStatus:     func(o *v1alpha1.TalosCredentialRequest) { o.Status.Role = "os:reader" },
				WrittenStatus: "os:reader",
			})
		}},
		{"MachineReclaim", func(t *testing.T) {
			itest.APIRunCRUD(t, itest.APICRUDCase[*v1alpha1.MachineReclaim, *v1alpha1.MachineReclaimList]{
				Namespaced: true,
				Client: func(cs versioned.Interface, ns string) itest.APICRUDClient[*v1alpha1.MachineReclaim, *v1alpha1.MachineReclaimList] {
					return cs.IchorV1alpha1().MachineReclaims(ns)
				},
				Fixture: func(_ testing.TB, name, ns string) *v1alpha1.MachineReclaim { return itest.APIMachineReclaim(name, ns) },
				AfterCreate: func(t *testing.T, r *v1alpha1.MachineReclaim) {
					if r.Spec.Role != v1alpha1.MachineRoleWorker || r.Spec.Graceful != nil || r.Spec.Wipe != "" {
						t.Errorf("reclaim defaults: role %q graceful %v wipe %q, want worker and no reset options for a managed machine",
							r.Spec.Role, r.Spec.Graceful, r.Spec.Wipe)
					}
				},
				SpecMark:      func(o *v1alpha1.MachineReclaim) string { return string(o.Spec.Role) },
				MutateSpec:    func(o *v1alpha1.MachineReclaim) { o.Spec.Role = itest.APIToggle(o.Spec.Role, "worker", "controlplane") },
				ImmutableSpec: true,
				StatusMark:    func(o *v1alpha1.MachineReclaim) string { return string(o.Status.Phase) },
				SetStatus:     func(o *v1alpha1.MachineReclaim) { o.Status.Phase = v1alpha1.ReclaimResetting },
				InitialStatus: "Pending",
				WrittenStatus: "Resetting",
			})
		}},
		{"IchorUser", func(t *testing.T) {
			var n itest.APICounter
			itest.APIRunCRUD(t, itest.APICRUDCase[*v1alpha1.IchorUser, *v1alpha1.IchorUserList]{
				Client: func(cs versioned.Interface, _ string) itest.APICRUDClient[*v1alpha1.IchorUser, *v1alpha1.IchorUserList] {
					return cs.IchorV1alpha1().IchorUsers()
				},
				Fixture:    func(_ testing.TB, name, _ string) *v1alpha1.IchorUser { return itest.APIIchorUser(name) },
				SpecMark:   func(o *v1alpha1.IchorUser) string { return o.Spec.DisplayName },
				MutateSpec: func(o *v1alpha1.IchorUser) { o.Spec.DisplayName = fmt.Sprintf("Renamed %d", n.Next()) },
				// passwordSet belongs to the password subresource and
				// lastLoginAt to the login one; conditions to /status.
				StatusMark: func(o *v1alpha1.IchorUser) string {
					if len(o.Status.Conditions) == 0 {
						return "none"
					}
					return o.Status.Conditions[0].Reason
				},
				SetStatus: func(o *v1alpha1.IchorUser) {
					o.Status.Conditions = []metav1.Condition{{Type: "Reviewed", Status: metav1.ConditionTrue, Reason: "Audited",
						LastTransitionTime: metav1.Unix(1767225600, 0)}}
				},
				InitialStatus: "none",
				WrittenStatus: "Audited",
			})
		}},
		{"IchorInstallation", func(t *testing.T) {
			var n itest.APICounter
			itest.APIRunCRUD(t, itest.APICRUDCase[*v1alpha1.IchorInstallation, *v1alpha1.IchorInstallationList]{
				Client: func(cs versioned.Interface, _ string) itest.APICRUDClient[*v1alpha1.IchorInstallation, *v1alpha1.IchorInstallationList] {
					return cs.IchorV1alpha1().IchorInstallations()
				},
				Fixture: func(_ testing.TB, _, _ string) *v1alpha1.IchorInstallation { return itest.APIIchorInstallation() },
				AfterCreate: func(t *testing.T, in *v1alpha1.IchorInstallation) {
					if in.Name != "ichor" {
						t.Errorf("installation name = %q, want ichor", in.Name)
					}
					if d := in.Spec.Settings.ScanInterval; d == nil || d.Duration != 5*time.Minute {
						t.Errorf("scanInterval = %v, want the 5m default", d)
					}
				},
				SpecMark:   func(o *v1alpha1.IchorInstallation) string { return o.Spec.Version },
				MutateSpec: func(o *v1alpha1.IchorInstallation) { o.Spec.Version = fmt.Sprintf("v0.%d.0", 1+n.Next()) },
				// Version and settings, the whole spec, change only through their subresources.
				ImmutableSpec:   true,
				ImmutableCauses: []string{"spec.version"},
				StatusMark: func(o *v1alpha1.IchorInstallation) string {
					if len(o.Status.Components) == 0 {
						return ""
					}
					return o.Status.Components[0].Name + "@" + o.Status.Components[0].Version
				},
				SetStatus: func(o *v1alpha1.IchorInstallation) {
					o.Status.Components = []v1alpha1.ComponentVersion{{Name: "ichor-apiserver", Version: "v0.1.0"}}
				},
				WrittenStatus: "ichor-apiserver@v0.1.0",
			})
		}},
	}
	for _, c := range cases {
		t.Run(c.kind, c.run)
	}
}
