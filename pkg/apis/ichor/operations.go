package ichor

import (
	"fmt"
	"slices"
)

// OperationDescriptor is everything Ichor says about one operation type,
// but how the controller runs it: validation, admission, the console, the
// CLI, the RBAC roles (artifacts/roles.yaml, checked by its test) and
// docs/reference/operations.md are built from or checked against
// Operations. The controller keeps one runner per type
// (pkg/controller/operation), and its test checks that every descriptor has
// one and every runner a descriptor.
// +k8s:deepcopy-gen=false
type OperationDescriptor struct {
	// Type is spec.type.
	Type OperationType
	// Role is the lowest of the default roles that holds the start verb on
	// talosoperations/<type>: operators start the routine types, admins
	// those that take nodes or data away for longer than a reboot.
	Role UserRole
	// Machines says what spec.machines may name.
	Machines MachineScope
	// Targets are the machines the operation acts on when spec.machines
	// names none.
	Targets OperationTargets
	// Parameters are the spec's parameter blocks of this type; every other
	// type's are forbidden.
	Parameters []OperationParameter
	// Batched types take spec.maxUnavailable workers away at once; the
	// others refuse it.
	Batched bool
	// Destructive types take nodes or data away for longer than a reboot:
	// the console has the person type the cluster's name to start one.
	Destructive bool
	// Does is what the operation does, in words the machines it acts on
	// follow ("reboots", "upgrades Talos to v1.13.1 on").
	Does func(spec *TalosOperationSpec) string
	// Doc is one line on what the type does, for the reference docs and
	// the CLI.
	Doc string
}

// MachineScope says what spec.machines may name for an operation type.
type MachineScope string

const (
	// MachinesOptional: spec.machines picks some of the targets; empty
	// means the type's default targets.
	MachinesOptional MachineScope = "optional"
	// MachinesRequired: the type acts on named machines only.
	MachinesRequired MachineScope = "required"
	// MachinesForbidden: the type acts on the cluster as a whole.
	MachinesForbidden MachineScope = "forbidden"
)

// OperationTargets are the machines an operation acts on when
// spec.machines names none.
type OperationTargets string

const (
	TargetsEveryMachine  OperationTargets = "every machine"
	TargetsControlPlanes OperationTargets = "the control planes"
)

// ParameterPresence says whether a type's parameter block must be set.
type ParameterPresence string

const (
	ParameterRequired ParameterPresence = "required"
	ParameterOptional ParameterPresence = "optional"
	// ParameterDefaulted may be left out of a request: defaulting fills it
	// in (v1alpha1.SetDefaults_TalosOperationSpec), and validation then
	// requires it.
	ParameterDefaulted ParameterPresence = "defaulted"
)

// OperationParameter is a parameter block of TalosOperationSpec.
// +k8s:deepcopy-gen=false
type OperationParameter struct {
	// Field is the block's field as the API names it (talosUpgrade).
	Field string
	// Presence says whether the type needs it.
	Presence ParameterPresence
	// IsSet reports whether spec sets the block.
	IsSet func(spec *TalosOperationSpec) bool
}

// Path is the parameter's path in a TalosOperation (spec.talosUpgrade).
func (p OperationParameter) Path() string { return "spec." + p.Field }

// Operations are every operation type, in the order the API lists them.
// Adding a type here is the first step; the tests of validation, the
// controller, the console and artifacts/roles.yaml say what else it needs.
var Operations = []OperationDescriptor{
	{
		Type: OperationTalosUpgrade, Role: UserRoleOperator, Machines: MachinesOptional, Targets: TargetsEveryMachine, Batched: true,
		Parameters: []OperationParameter{{"talosUpgrade", ParameterRequired, func(s *TalosOperationSpec) bool { return s.TalosUpgrade != nil }}},
		Does: func(s *TalosOperationSpec) string {
			if s.TalosUpgrade == nil {
				return "upgrades Talos on"
			}
			return "upgrades Talos to " + s.TalosUpgrade.Version + " on"
		},
		Doc: "Upgrades Talos as talosctl upgrade does; with stage: true it installs for the next reboot.",
	},
	{
		Type: OperationKubernetesUpgrade, Role: UserRoleOperator, Machines: MachinesForbidden, Targets: TargetsEveryMachine,
		Parameters: []OperationParameter{{"kubernetesUpgrade", ParameterRequired, func(s *TalosOperationSpec) bool { return s.KubernetesUpgrade != nil }}},
		Does: func(s *TalosOperationSpec) string {
			if s.KubernetesUpgrade == nil {
				return "upgrades Kubernetes on"
			}
			return "upgrades Kubernetes to " + s.KubernetesUpgrade.Version + " on"
		},
		Doc: "Upgrades Kubernetes as talosctl upgrade-k8s does, a component at a time; no node reboots.",
	},
	{
		Type: OperationReboot, Role: UserRoleOperator, Machines: MachinesOptional, Targets: TargetsEveryMachine, Batched: true,
		Parameters: []OperationParameter{{"reboot", ParameterOptional, func(s *TalosOperationSpec) bool { return s.Reboot != nil }}},
		Does:       says("reboots"),
		Doc:        "Reboots each machine, drained first unless reboot.force.",
	},
	{
		Type: OperationEtcdDefrag, Role: UserRoleOperator, Machines: MachinesOptional, Targets: TargetsControlPlanes,
		Does: says("defragments etcd on"),
		Doc:  "Defragments etcd one member at a time, reporting each database's size.",
	},
	{
		Type: OperationCARotation, Role: UserRoleAdmin, Machines: MachinesForbidden, Targets: TargetsEveryMachine, Destructive: true,
		Parameters: []OperationParameter{{"caRotation", ParameterDefaulted, func(s *TalosOperationSpec) bool { return s.CARotation != nil }}},
		Does:       says("rotates the certificate authorities of"),
		Doc:        "Replaces the Talos API CA, the Kubernetes CA or both, as talosctl rotate-ca; no reboot.",
	},
	{
		Type: OperationKeyRotation, Role: UserRoleAdmin, Machines: MachinesForbidden, Targets: TargetsEveryMachine, Destructive: true,
		Parameters: []OperationParameter{{"keyRotation", ParameterDefaulted, func(s *TalosOperationSpec) bool { return s.KeyRotation != nil }}},
		Does:       says("rotates the disk encryption keys of"),
		Doc:        "Replaces the disk-encryption key of STATE and EPHEMERAL: two reboots of each machine.",
	},
	{
		Type: OperationEtcdRestore, Role: UserRoleAdmin, Machines: MachinesForbidden, Targets: TargetsEveryMachine, Destructive: true,
		Parameters: []OperationParameter{{"etcdRestore", ParameterRequired, func(s *TalosOperationSpec) bool { return s.EtcdRestore != nil }}},
		Does: func(s *TalosOperationSpec) string {
			if s.EtcdRestore == nil {
				return "replaces etcd's data, and restarts the workers' kubelets, on"
			}
			return "replaces etcd's data with backup " + s.EtcdRestore.Backup + ", and restarts the workers' kubelets, on"
		},
		Doc: "Restores etcd from a TalosBackup's snapshot, then restarts every worker's kubelet.",
	},
	{
		Type: OperationNodeReset, Role: UserRoleAdmin, Machines: MachinesRequired, Targets: TargetsEveryMachine, Destructive: true,
		Parameters: []OperationParameter{{"nodeReset", ParameterOptional, func(s *TalosOperationSpec) bool { return s.NodeReset != nil }}},
		Does: func(s *TalosOperationSpec) string {
			wipe := WipeModeAll
			if s.NodeReset != nil && s.NodeReset.Wipe != "" {
				wipe = s.NodeReset.Wipe
			}
			return fmt.Sprintf("resets, wiping %s,", wipe)
		},
		Doc: "Wipes the named machines as Talos's reset does and brings each back into its cluster.",
	},
	{
		Type: OperationNodeShutdown, Role: UserRoleAdmin, Machines: MachinesRequired, Targets: TargetsEveryMachine, Batched: true, Destructive: true,
		Parameters: []OperationParameter{{"nodeShutdown", ParameterOptional, func(s *TalosOperationSpec) bool { return s.NodeShutdown != nil }}},
		Does:       says("shuts down"),
		Doc:        "Powers the named machines off, drained first unless nodeShutdown.force.",
	},
	{
		Type: OperationShutdown, Role: UserRoleAdmin, Machines: MachinesForbidden, Targets: TargetsEveryMachine, Batched: true, Destructive: true,
		Does: says("backs up, then shuts down"),
		Doc:  "Backs the cluster up (a TalosBackup), then powers every machine off, workers first.",
	},
}

// RetiredOperationTypes are types the API once accepted and now refuses,
// each with what to use instead. Operations stored before then still
// decode; the controller fails them, saying so.
var RetiredOperationTypes = map[OperationType]string{
	"etcd-snapshot": "etcd-snapshot is not an operation: a TalosBackup takes the cluster's etcd snapshot and machine configs " +
		"to its backup target, and GET talosmachines/NAME/etcd-snapshot (ichor download etcd-snapshot NAME) streams one control plane's snapshot",
}

// says is a sentence that needs nothing of the spec.
func says(words string) func(*TalosOperationSpec) string {
	return func(*TalosOperationSpec) string { return words }
}

// OperationFor is the descriptor of type t, if it is one.
func OperationFor(t OperationType) (OperationDescriptor, bool) {
	i := slices.IndexFunc(Operations, func(d OperationDescriptor) bool { return d.Type == t })
	if i < 0 {
		return OperationDescriptor{}, false
	}
	return Operations[i], true
}

// OperationTypes are the types of Operations, in their order.
func OperationTypes() []OperationType {
	types := make([]OperationType, len(Operations))
	for i, d := range Operations {
		types[i] = d.Type
	}
	return types
}

// OperationTypesWhere are the types whose descriptor has keep, in order.
func OperationTypesWhere(keep func(OperationDescriptor) bool) []OperationType {
	var types []OperationType
	for _, d := range Operations {
		if keep(d) {
			types = append(types, d.Type)
		}
	}
	return types
}
