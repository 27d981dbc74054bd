package v1alpha1

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// Who writes what of a TalosMachine's, a TalosCluster's and a
// TalosConfigPatch's status. ichor-controller's writers apply their share
// with server-side apply, each under a field manager of its own, so that
// none drops or overwrites another's share whatever copy of the object it
// holds. Each writer applies the fields and condition types of its row
// and no others; the writers take their condition types from this table,
// and tests hold every writer to its row (the writers' unit tests read
// what they apply; an integration journey reads managedFields).
//
// A field in two rows is one two writers hand between them: the row that
// writes it second says when. A condition type has one owner; a writer
// may inherit another's (Inherited) when the owner stops looking.

// The field managers of ichor-controller's status writes.
const (
	FieldManagerIntake         = "ichor-intake"
	FieldManagerMachineConfig  = "ichor-machineconfig"
	FieldManagerKubeletServing = "ichor-kubeletserving"
	FieldManagerOperation      = "ichor-operation"
	FieldManagerClusterHealth  = "ichor-taloscluster"
	FieldManagerBootstrapToken = "ichor-bootstrap-token"
	FieldManagerClusterSecrets = "ichor-clustersecrets"
	FieldManagerSecretsDigest  = "ichor-secrets-digest"
	FieldManagerDisruption     = "ichor-disruption"
	FieldManagerBackup         = "ichor-backup"
	FieldManagerCARotation     = "ichor-ca-rotation"
	FieldManagerKeyRotation    = "ichor-key-rotation"
	FieldManagerKubernetesKeys = "ichor-kubernetes-key-rotation"
	FieldManagerConfigPatch    = "ichor-configpatch"
)

// statusWriter is one row of the table: a writer of a kind's status and
// the share it owns. It is no API type.
// +k8s:openapi-gen=false
// +k8s:deepcopy-gen=false
type statusWriter struct {
	// Kind is the kind whose status it writes.
	Kind string
	// FieldManager names it in managedFields. Empty for writes that carry
	// no name of their own: a subresource the API server writes on a
	// requester's behalf, or a patch under the process's default name.
	FieldManager string
	// By is who writes, and when, for people.
	By string
	// Fields are the status fields it writes, by JSON name; conditions
	// are Conditions'.
	Fields []string
	// Conditions are the condition types it owns.
	Conditions []string
	// Inherited are condition types another row owns that it writes too
	// once their owner stops looking.
	Inherited []string
}

// statusWriters is the table.
var statusWriters = []statusWriter{
	// TalosMachine.
	{kindMachine, FieldManagerIntake,
		"intake (pkg/intake): the node in maintenance mode, pinned and described, until it is configured",
		[]string{"phase", "observedGeneration", "maintenance", "hardware", "talosVersion"},
		[]string{MachineConditionCertificateVerified, MachineConditionReachable, MachineConditionApproved}, nil},
	{kindMachine, FieldManagerMachineConfig,
		"the config reconciler (pkg/configstatus): the config installed and rolled out, the node followed to Ready, reset on deletion; phase and observedGeneration from the first config on",
		[]string{"phase", "observedGeneration", "nodeName", "security", "appliedConfig"},
		[]string{MachineConditionConfigApplied, MachineConditionReady},
		// Intake stops looking at a configured machine.
		[]string{MachineConditionCertificateVerified, MachineConditionReachable}},
	{kindMachine, FieldManagerKubeletServing,
		"the kubelet serving approver: the certificate last issued for the machine's node",
		[]string{"kubeletServingCertificate"}, nil, nil},
	{kindMachine, FieldManagerOperation,
		"TalosOperations: the Talos version an upgrade installed (intake no longer looks), the Kubernetes versions an upgrade set",
		[]string{"talosVersion", "kubernetes"}, nil, nil},
	{kindMachine, "",
		"the API server: talosmachines/approval (a person's decision, or a reclaim's) and talosmachines/override (an admin's grant)",
		[]string{"approval", "override"}, nil, nil},

	// TalosCluster.
	{kindCluster, FieldManagerClusterHealth,
		"the cluster health reconciler (pkg/controller/taloscluster): machine counts, the bootstrap, etcd, the Kubernetes API, Nodes, Ready, the installer image, the version contract of the machines' configs",
		[]string{"phase", "observedGeneration", "machines", "talosVersion", "kubernetesVersion", "bootstrappedAt", "kubernetesCA", "image"},
		[]string{ClusterConditionMachinesReady, ClusterConditionBootstrapped, ClusterConditionEtcdHealthy,
			ClusterConditionKubernetesAPIReachable, ClusterConditionNodesReady, ClusterConditionReady,
			ClusterConditionImageReady, ClusterConditionConfigContract}, nil},
	{kindCluster, FieldManagerBootstrapToken,
		"the bootstrap token reconciler: whether the cluster's bootstrap token authenticates",
		nil, []string{ClusterConditionBootstrapTokenEnabled}, nil},
	{kindCluster, FieldManagerClusterSecrets,
		"the secrets reconciler: whether the cluster's secrets bundle is there and sound",
		nil, []string{ClusterConditionSecretsReady}, nil},
	{kindCluster, FieldManagerSecretsDigest,
		"the bundle store (pkg/bundlestore): the digest of the bundle ichor-controller generated, before the bundle is written",
		[]string{"secretsDigest"}, nil, nil},
	{kindCluster, FieldManagerKubeletServing,
		"the kubelet serving approver: whether every machine has a serving certificate, and the verification latch",
		nil, []string{ClusterConditionKubeletServingCertificates, ClusterConditionKubeletServingVerified}, nil},
	{kindCluster, FieldManagerDisruption,
		"the disruption budget (pkg/disruption): the machine, or batch, that may go away now",
		[]string{"disruption"}, nil, nil},
	{kindCluster, FieldManagerBackup,
		"the backup scheduler: the last scheduled and successful backups",
		[]string{"backup"}, []string{ClusterConditionBackupSucceeded}, nil},
	{kindCluster, FieldManagerCARotation,
		"a ca-rotation TalosOperation: the phase of the rotation in progress",
		[]string{"caRotation"}, nil, nil},
	{kindCluster, FieldManagerKeyRotation,
		"a key-rotation TalosOperation of the disk-encryption key: the phase of the rotation in progress",
		[]string{"diskKeyRotation"}, nil, nil},
	{kindCluster, FieldManagerKubernetesKeys,
		"a key-rotation TalosOperation of Kubernetes keys: the phase of the rotation in progress",
		[]string{"kubernetesKeyRotation"}, nil, nil},
	{kindCluster, "",
		"patches under ichor-controller's default name: a rotation's end (the CA certificate, new admin credentials, the key slot, the secretbox key's name), the credentials' one download; and the API server's talosclusters/override",
		[]string{"kubernetesCA", "credentials", "diskKeySlot", "secretsEncryptionKeyName", "override"}, nil, nil},

	// TalosConfigPatch.
	{kindConfigPatch, FieldManagerConfigPatch,
		"the config patch reconciler: whether the patch renders, its effect, the machines that run it",
		[]string{"observedGeneration", "effect", "appliedMachines"}, []string{PatchConditionValid, PatchConditionApplied}, nil},
	{kindConfigPatch, "",
		"the API server: talosconfigpatches/override (an admin's grant)",
		[]string{"override"}, nil, nil},
}

// StatusFieldManagers are the field managers that write obj's kind's
// status, in the table's order.
func StatusFieldManagers(obj runtime.Object) []string {
	var managers []string
	for _, w := range statusWriters {
		if w.Kind == kindOf(obj) && w.FieldManager != "" {
			managers = append(managers, w.FieldManager)
		}
	}
	return managers
}

// OwnedStatusFields are the status fields (JSON names, conditions aside)
// manager writes on obj's kind.
func OwnedStatusFields(obj runtime.Object, manager string) []string {
	return slices.Clone(rowOf(obj, manager).Fields)
}

// OwnedConditions are the condition types manager owns on obj's kind.
func OwnedConditions(obj runtime.Object, manager string) []string {
	return slices.Clone(rowOf(obj, manager).Conditions)
}

// InheritedConditions are the condition types manager writes on obj's
// kind once their owner stops looking.
func InheritedConditions(obj runtime.Object, manager string) []string {
	return slices.Clone(rowOf(obj, manager).Inherited)
}

// rowOf is manager's row for obj's kind. It panics without one: a writer
// that writes a status without a row is a mistake the tests catch.
func rowOf(obj runtime.Object, manager string) statusWriter {
	kind := kindOf(obj)
	for _, w := range statusWriters {
		if w.Kind == kind && w.FieldManager == manager && manager != "" {
			return w
		}
	}
	panic(fmt.Sprintf("v1alpha1: field manager %q has no row for the status of %s", manager, kind))
}

// kindOf is the kind of obj as the table names it.
func kindOf(obj runtime.Object) string {
	switch obj.(type) {
	case *TalosMachine:
		return kindMachine
	case *TalosCluster:
		return kindCluster
	case *TalosConfigPatch:
		return kindConfigPatch
	}
	panic(fmt.Sprintf("v1alpha1: no status writers are on record for %T", obj))
}
