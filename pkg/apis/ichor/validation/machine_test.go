package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// validMachine is an internal TalosMachine assigned to a cluster, with the
// v1alpha1 defaults (port, role) already filled in by hand.
func validMachine() *ichor.TalosMachine {
	return &ichor.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: "team-a", ResourceVersion: "1"},
		Spec: ichor.TalosMachineSpec{
			ClusterName: "prod",
			Role:        ichor.MachineRoleWorker,
			Address:     "10.5.0.3:50000",
		},
	}
}

// unassignedMachine is a machine that belongs to no cluster yet.
func unassignedMachine() *ichor.TalosMachine {
	m := validMachine()
	m.Spec.ClusterName = ""
	m.Spec.Role = ""
	return m
}

const sha256Hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

// spkiFingerprint is a SHA-256 in standard base64, as talosctl prints fingerprints.
const spkiFingerprint = "n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg="

func TestValidateTalosMachine(t *testing.T) {
	cases := []struct {
		name    string
		machine func() *ichor.TalosMachine
		mutate  func(m *ichor.TalosMachine)
		want    []fe
	}{
		{name: "valid", machine: validMachine},
		{name: "valid unassigned", machine: unassignedMachine},
		{
			name:    "unassigned machine may carry a role",
			machine: unassignedMachine,
			mutate:  func(m *ichor.TalosMachine) { m.Spec.Role = ichor.MachineRoleControlPlane },
		},
		{
			name: "valid with every option",
			mutate: func(m *ichor.TalosMachine) {
				m.Spec.Role = ichor.MachineRoleControlPlane
				m.Spec.Address = "[fd00::3]:50000"
				m.Spec.Hostname = "cp-1.prod.example.com"
				m.Spec.Install.Disk = "/dev/nvme0n1"
				m.Spec.Schematic = &ichor.Schematic{SystemExtensions: []string{"siderolabs/nvidia-open-gpu-kernel-modules-lts"}}
			},
		},
		{
			name:   "dns name address",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Address = "node-1.example.com:50000" },
		},
		{
			name:   "bad metadata",
			mutate: func(m *ichor.TalosMachine) { m.Name = ""; m.Namespace = "Team_A" },
			want:   []fe{required("metadata.name"), invalid("metadata.namespace")},
		},
		{
			name:   "assigned machine without role",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Role = "" },
			want:   []fe{required("spec.role")},
		},
		{
			name:   "unknown role",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Role = "master" },
			want:   []fe{notSupported("spec.role")},
		},
		{
			name:    "unknown role on an unassigned machine",
			machine: unassignedMachine,
			mutate:  func(m *ichor.TalosMachine) { m.Spec.Role = "master" },
			want:    []fe{notSupported("spec.role")},
		},
		{
			name:   "bad cluster name",
			mutate: func(m *ichor.TalosMachine) { m.Spec.ClusterName = "Prod" },
			want:   []fe{invalid("spec.clusterName")},
		},
		{
			name:   "address missing",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Address = "" },
			want:   []fe{required("spec.address")},
		},
		{
			name:   "address without port",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Address = "10.5.0.3" },
			want:   []fe{invalid("spec.address")},
		},
		{
			name:   "address with port zero",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Address = "10.5.0.3:0" },
			want:   []fe{invalid("spec.address")},
		},
		{
			name:   "address with port out of range",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Address = "10.5.0.3:65536" },
			want:   []fe{invalid("spec.address")},
		},
		{
			name:   "address with a host that is not a DNS name",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Address = "node_1:50000" },
			want:   []fe{invalid("spec.address")},
		},
		{
			name:   "address with an empty host",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Address = ":50000" },
			want:   []fe{invalid("spec.address")},
		},
		{
			name:   "bad hostname",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Hostname = "Node_1" },
			want:   []fe{invalid("spec.hostname")},
		},
		{
			name:   "install disk not a device path",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Install.Disk = "sda" },
			want:   []fe{invalid("spec.install.disk")},
		},
		{
			name:   "install disk is /dev/ itself",
			mutate: func(m *ichor.TalosMachine) { m.Spec.Install.Disk = "/dev/" },
			want:   []fe{invalid("spec.install.disk")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mk := tc.machine
			if mk == nil {
				mk = validMachine
			}
			m := mk()
			if tc.mutate != nil {
				tc.mutate(m)
			}
			expectErrors(t, ValidateTalosMachine(m), tc.want...)
		})
	}
}

// TestValidateTalosMachineDefaulted checks that the defaults add the Talos API
// port to a bare host, and the worker role to an assigned machine, so that the
// result validates.
func TestValidateTalosMachineDefaulted(t *testing.T) {
	cases := []struct {
		address, cluster string
		wantAddress      string
		wantRole         ichor.MachineRole
	}{
		{"10.5.0.3", "prod", "10.5.0.3:50000", ichor.MachineRoleWorker},
		{"fd00::3", "prod", "[fd00::3]:50000", ichor.MachineRoleWorker},
		{"[fd00::3]", "", "[fd00::3]:50000", ""},
		{"node-1.example.com", "", "node-1.example.com:50000", ""},
		{"node-1.example.com:50001", "prod", "node-1.example.com:50001", ichor.MachineRoleWorker},
	}
	for _, tc := range cases {
		t.Run(tc.address, func(t *testing.T) {
			in := &v1alpha1.TalosMachine{
				ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: "team-a"},
				Spec:       v1alpha1.TalosMachineSpec{ClusterName: tc.cluster, Address: tc.address},
			}
			out := &ichor.TalosMachine{}
			defaultedInternal(t, in, out)
			if out.Spec.Address != tc.wantAddress || out.Spec.Role != tc.wantRole {
				t.Errorf("defaulted to address %q role %q, want %q %q", out.Spec.Address, out.Spec.Role, tc.wantAddress, tc.wantRole)
			}
			expectErrors(t, ValidateTalosMachine(out))
		})
	}
}

func TestValidateTalosMachineUpdate(t *testing.T) {
	cases := []struct {
		name   string
		old    func() *ichor.TalosMachine
		mutate func(m *ichor.TalosMachine)
		want   []fe
	}{
		{name: "unchanged", old: validMachine, mutate: func(m *ichor.TalosMachine) {}},
		{
			name: "the schematic changes only through its subresource", old: validMachine,
			mutate: func(m *ichor.TalosMachine) {
				m.Spec.Schematic = &ichor.Schematic{ExtraKernelArgs: []string{"init=/bin/sh"}}
			},
			want: []fe{forbidden("spec.schematic")},
		},
		{
			name: "a bad schematic", old: validMachine,
			mutate: func(m *ichor.TalosMachine) {
				m.Spec.Schematic = &ichor.Schematic{SystemExtensions: []string{"not an extension"}}
			},
			want: []fe{invalid("spec.schematic.systemExtensions[0]"), forbidden("spec.schematic")},
		},
		{
			name: "assigning an unassigned machine",
			old:  unassignedMachine,
			mutate: func(m *ichor.TalosMachine) {
				m.Spec.ClusterName = "prod"
				m.Spec.Role = ichor.MachineRoleControlPlane
			},
		},
		{
			name:   "changing the role of an unassigned machine",
			old:    unassignedMachine,
			mutate: func(m *ichor.TalosMachine) { m.Spec.Role = ichor.MachineRoleWorker },
		},
		{
			name:   "assigning without a role is still checked",
			old:    unassignedMachine,
			mutate: func(m *ichor.TalosMachine) { m.Spec.ClusterName = "prod" },
			want:   []fe{required("spec.role")},
		},
		{
			name: "address, hostname and disk may change",
			old:  validMachine,
			mutate: func(m *ichor.TalosMachine) {
				m.Spec.Address = "10.5.0.30:50000"
				m.Spec.Hostname = "worker-1"
				m.Spec.Install.Disk = "/dev/sdb"
			},
		},
		{
			name:   "moving to another cluster",
			old:    validMachine,
			mutate: func(m *ichor.TalosMachine) { m.Spec.ClusterName = "staging" },
			want:   []fe{invalid("spec.clusterName")},
		},
		{
			name:   "leaving the cluster",
			old:    validMachine,
			mutate: func(m *ichor.TalosMachine) { m.Spec.ClusterName = "" },
			want:   []fe{invalid("spec.clusterName")},
		},
		{
			name:   "changing the role in a cluster",
			old:    validMachine,
			mutate: func(m *ichor.TalosMachine) { m.Spec.Role = ichor.MachineRoleControlPlane },
			want:   []fe{invalid("spec.role")},
		},
		{
			name:   "spec is still validated",
			old:    validMachine,
			mutate: func(m *ichor.TalosMachine) { m.Spec.Address = "10.5.0.3" },
			want:   []fe{invalid("spec.address")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := tc.old()
			m := old.DeepCopy()
			tc.mutate(m)
			errs := ValidateTalosMachineUpdate(m, old)
			expectErrors(t, errs, tc.want...)
			for _, e := range errs {
				if e.Field == "spec.clusterName" && !strings.Contains(e.Detail, "MachineReclaim") {
					t.Errorf("immutability error should point at MachineReclaim: %v", e)
				}
			}
		})
	}
}

func TestValidateTalosMachineStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *ichor.TalosMachineStatus)
		want   []fe
	}{
		{name: "empty status", mutate: func(s *ichor.TalosMachineStatus) {}},
		{
			name: "full status",
			mutate: func(s *ichor.TalosMachineStatus) {
				s.Phase = ichor.MachinePhaseReady
				s.ObservedGeneration = 2
				s.Conditions = []metav1.Condition{goodCondition("Reachable"), goodCondition("Ready")}
				s.Maintenance = &ichor.MaintenanceStatus{CertificateFingerprint: spkiFingerprint, SeenAt: fixedTime}
				s.Hardware = &ichor.HardwareStatus{
					UUID:      "4c4c4544-0042-3510-8052-b4c04f4e3232",
					Disks:     []ichor.Disk{{Path: "/dev/sda", SizeBytes: 1 << 40}, {Path: "/dev/sdb"}},
					Addresses: []string{"10.5.0.3/24", "fd00::3/64", "10.5.0.4"},
				}
				s.TalosVersion = "v1.13.0"
				s.NodeName = "node-1"
				s.Approval = &ichor.ApprovalStatus{Decision: ichor.ApprovalApproved, By: "alice", At: fixedTime}
				s.AppliedConfig = &ichor.AppliedConfigStatus{Hash: sha256Hex, Effect: ichor.ConfigEffectNoReboot, AppliedAt: fixedTime}
				s.KubeletServingCertificate = &ichor.KubeletServingCertificateStatus{Request: "csr-x7k2p", IssuedAt: &fixedTime}
			},
		},
		{
			name:   "unknown phase",
			mutate: func(s *ichor.TalosMachineStatus) { s.Phase = "Sleeping" },
			want:   []fe{notSupported("status.phase")},
		},
		{
			name:   "fingerprint missing",
			mutate: func(s *ichor.TalosMachineStatus) { s.Maintenance = &ichor.MaintenanceStatus{SeenAt: fixedTime} },
			want:   []fe{required("status.maintenance.certificateFingerprint")},
		},
		{
			name: "fingerprint as hex rather than base64",
			mutate: func(s *ichor.TalosMachineStatus) {
				s.Maintenance = &ichor.MaintenanceStatus{CertificateFingerprint: sha256Hex}
			},
			want: []fe{invalid("status.maintenance.certificateFingerprint")},
		},
		{
			name: "fingerprint too short",
			mutate: func(s *ichor.TalosMachineStatus) {
				s.Maintenance = &ichor.MaintenanceStatus{CertificateFingerprint: spkiFingerprint[:40]}
			},
			want: []fe{invalid("status.maintenance.certificateFingerprint")},
		},
		{
			name: "fingerprint not base64",
			mutate: func(s *ichor.TalosMachineStatus) {
				s.Maintenance = &ichor.MaintenanceStatus{CertificateFingerprint: "!!" + spkiFingerprint[2:]}
			},
			want: []fe{invalid("status.maintenance.certificateFingerprint")},
		},
		{
			name: "bad hardware",
			mutate: func(s *ichor.TalosMachineStatus) {
				s.Hardware = &ichor.HardwareStatus{
					Disks:     []ichor.Disk{{Path: "/dev/sda"}, {Path: "/dev/sda"}, {Path: "", SizeBytes: -1}},
					Addresses: []string{"10.5.0.3/24", "not-an-address"},
				}
			},
			want: []fe{
				duplicate("status.hardware.disks[1].path"), required("status.hardware.disks[2].path"),
				invalid("status.hardware.disks[2].sizeBytes"), invalid("status.hardware.addresses[1]"),
			},
		},
		{
			name:   "talos version without leading v",
			mutate: func(s *ichor.TalosMachineStatus) { s.TalosVersion = "1.13.0" },
			want:   []fe{invalid("status.talosVersion")},
		},
		{
			name:   "approval incomplete",
			mutate: func(s *ichor.TalosMachineStatus) { s.Approval = &ichor.ApprovalStatus{} },
			want:   []fe{required("status.approval.decision"), required("status.approval.by")},
		},
		{
			name:   "approval with unknown decision",
			mutate: func(s *ichor.TalosMachineStatus) { s.Approval = &ichor.ApprovalStatus{Decision: "Maybe", By: "alice"} },
			want:   []fe{notSupported("status.approval.decision")},
		},
		{
			name: "applied config with bad hash and effect",
			mutate: func(s *ichor.TalosMachineStatus) {
				s.AppliedConfig = &ichor.AppliedConfigStatus{Hash: "abc", Effect: "Explode"}
			},
			want: []fe{invalid("status.appliedConfig.hash"), notSupported("status.appliedConfig.effect")},
		},
		{
			name:   "applied config without hash",
			mutate: func(s *ichor.TalosMachineStatus) { s.AppliedConfig = &ichor.AppliedConfigStatus{} },
			want:   []fe{required("status.appliedConfig.hash")},
		},
		{
			name: "kubelet serving certificate without request",
			mutate: func(s *ichor.TalosMachineStatus) {
				s.KubeletServingCertificate = &ichor.KubeletServingCertificateStatus{}
			},
			want: []fe{required("status.kubeletServingCertificate.request")},
		},
	}
	for _, bc := range badConditionCases {
		cond := bc.conditions
		cases = append(cases, struct {
			name   string
			mutate func(s *ichor.TalosMachineStatus)
			want   []fe
		}{bc.name, func(s *ichor.TalosMachineStatus) { s.Conditions = cond }, bc.want("status.conditions")})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validMachine()
			m := old.DeepCopy()
			tc.mutate(&m.Status)
			expectErrors(t, ValidateTalosMachineStatusUpdate(m, old), tc.want...)
		})
	}
}
