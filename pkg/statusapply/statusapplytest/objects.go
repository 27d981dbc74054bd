package statusapplytest

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// at is the time every timestamp of the objects holds.
var at = metav1.NewTime(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))

// Namespace is the namespace of the objects.
const Namespace = "ns"

// Machine is TalosMachine m1 of cluster demo, with every status field set
// and a condition of every type the table knows for a machine.
func Machine() *v1alpha1.TalosMachine {
	m := &v1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: Namespace, Generation: 2, ResourceVersion: "7"},
		Spec:       v1alpha1.TalosMachineSpec{ClusterName: "demo", Role: v1alpha1.MachineRoleWorker, Address: "10.5.0.2:50000"},
		Status: v1alpha1.TalosMachineStatus{
			Phase: v1alpha1.MachinePhaseReady, ObservedGeneration: 2,
			Override:    &v1alpha1.OverrideStatus{Check: v1alpha1.CheckControlPlaneQuorum, Reason: "gone", By: "carol", At: at},
			Maintenance: &v1alpha1.MaintenanceStatus{CertificateFingerprint: strings.Repeat("A", 43) + "=", SeenAt: at},
			Hardware: &v1alpha1.HardwareStatus{UUID: "uuid-1", Serial: "s-1", Addresses: []string{"10.5.0.2"},
				Disks: []v1alpha1.Disk{{Path: "/dev/sda", SizeBytes: 1 << 30, Model: "disk", Serial: "d-1", Transport: "sata"}}},
			TalosVersion: "v1.13.0", NodeName: "m1",
			Approval:                  &v1alpha1.ApprovalStatus{Decision: v1alpha1.ApprovalApproved, By: "carol", At: at},
			AppliedConfig:             &v1alpha1.AppliedConfigStatus{Hash: strings.Repeat("ab", 32), Effect: v1alpha1.ConfigEffectReboot, AppliedAt: at, Contract: "v1.13"},
			KubeletServingCertificate: &v1alpha1.KubeletServingCertificateStatus{Request: "csr-1", IssuedAt: &at, NotAfter: &at},
			Kubernetes:                &v1alpha1.KubernetesVersions{APIServer: "v1.36.0", Kubelet: "v1.36.0"},
			Security:                  &v1alpha1.MachineSecurityStatus{SecureBoot: true, BootedWithUKI: true},
		},
	}
	m.Status.Conditions = conditions(m, m.Generation)
	return m
}

// Cluster is TalosCluster demo, with every status field set and a
// condition of every type the table knows for a cluster.
func Cluster() *v1alpha1.TalosCluster {
	c := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: Namespace, Generation: 3, ResourceVersion: "9"},
		Spec:       v1alpha1.TalosClusterSpec{ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://10.5.0.1:6443"}},
		Status: v1alpha1.TalosClusterStatus{
			Phase: v1alpha1.ClusterPhaseReady, ObservedGeneration: 3,
			Override:          &v1alpha1.OverrideStatus{Check: v1alpha1.CheckBootstrapWaitsForControlPlanes, Reason: "gone", By: "carol", At: at},
			Machines:          v1alpha1.MachineCounts{Total: 1, Ready: 1, Workers: 1},
			TalosVersion:      "v1.13.0",
			KubernetesVersion: "v1.36.0",
			BootstrappedAt:    &at,
			Disruption:        &v1alpha1.DisruptionStatus{Machine: "m1", MachineUID: "uid-m1", Action: v1alpha1.DisruptionReboot, Since: at},
			Backup:            &v1alpha1.ClusterBackupStatus{LastScheduleTime: &at, LastSuccessfulBackup: "b-1", LastSuccessfulTime: &at},
			KubernetesCA:      "-----BEGIN CERTIFICATE-----",
			CARotation:        &v1alpha1.CARotationStatus{Operation: "rotate", Phase: v1alpha1.CARotationAcceptNew, Since: &at, Talos: true},
			Credentials:       &v1alpha1.ClusterCredentialsStatus{Rotation: "rotate", RotatedAt: at},
			DiskKeyRotation:   &v1alpha1.DiskKeyRotationStatus{Operation: "rekey", Phase: v1alpha1.DiskKeyRotationPhases[0], Slot: 1, Since: &at},
			DiskKeySlot:       1,
			SecretsDigest:     strings.Repeat("cd", 32),
			Image:             &v1alpha1.ImageStatus{SchematicID: strings.Repeat("ef", 32), Installer: "factory.test/installer/x:v1.14.1", FactoryURL: "https://factory.test"},
			KubernetesKeyRotation: &v1alpha1.KubernetesKeyRotationStatus{Operation: "rekey-kube", Phase: v1alpha1.CARotationAcceptNew, Since: &at,
				ServiceAccount: true, SecretsEncryption: true, SecretDigest: "sha256:" + strings.Repeat("ab", 32)},
			SecretsEncryptionKeyName: "key3",
		},
	}
	c.Status.Conditions = conditions(c, c.Generation)
	return c
}

// Patch is TalosConfigPatch p1 of cluster demo, with every status field
// set and a condition of every type the table knows for a patch.
func Patch() *v1alpha1.TalosConfigPatch {
	p := &v1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: Namespace, Generation: 1},
		Spec:       v1alpha1.TalosConfigPatchSpec{ClusterName: "demo", Patch: "machine: {}"},
		Status: v1alpha1.TalosConfigPatchStatus{
			ObservedGeneration: 1,
			Override:           &v1alpha1.OverrideStatus{Check: v1alpha1.CheckControlPlaneQuorum, Reason: "r", By: "carol", At: at},
			Effect:             v1alpha1.ConfigEffectReboot,
			AppliedMachines:    []string{"m1"},
		},
	}
	p.Status.Conditions = conditions(p, p.Generation)
	return p
}

// conditions are a condition of every type the table knows for obj's kind.
func conditions(obj runtime.Object, generation int64) []metav1.Condition {
	var out []metav1.Condition
	for _, m := range v1alpha1.StatusFieldManagers(obj) {
		for _, t := range v1alpha1.OwnedConditions(obj, m) {
			out = append(out, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "Set", Message: "set by " + m,
				ObservedGeneration: generation, LastTransitionTime: at})
		}
	}
	return out
}
