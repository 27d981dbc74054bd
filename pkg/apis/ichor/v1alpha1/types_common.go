package v1alpha1

// MachineRole is the part a machine plays in its Talos cluster.
// +enum
type MachineRole string

const (
	// MachineRoleControlPlane runs etcd and the Kubernetes control plane.
	MachineRoleControlPlane MachineRole = "controlplane"
	// MachineRoleWorker runs workloads only.
	MachineRoleWorker MachineRole = "worker"
)

// ConfigEffect classifies what applying a machine-config change does to a node,
// which decides the order and pace of a rollout.
// +enum
type ConfigEffect string

const (
	// ConfigEffectNone means the change does not alter any machine's config.
	ConfigEffectNone ConfigEffect = "None"
	// ConfigEffectNoReboot means the change is applied live.
	ConfigEffectNoReboot ConfigEffect = "NoReboot"
	// ConfigEffectReboot means the node must reboot for the change to take effect.
	ConfigEffectReboot ConfigEffect = "Reboot"
	// ConfigEffectAPIServerRestart means the change restarts kube-apiserver on control planes.
	ConfigEffectAPIServerRestart ConfigEffect = "APIServerRestart"
)

// WipeMode says which disks a reset wipes, as Talos's reset modes do.
// +enum
type WipeMode string

const (
	// WipeModeAll wipes the whole system disk (every partition on it, user
	// volumes there included) and the user disks named for the reset; the
	// node comes back in maintenance mode.
	WipeModeAll WipeMode = "all"
	// WipeModeSystemDisk wipes the whole system disk only (user volumes on
	// it included); the node comes back in maintenance mode.
	WipeModeSystemDisk WipeMode = "system-disk"
	// WipeModeUserDisks wipes only the user disks named for the reset; the
	// system disk, the node's config and etcd's data stay, and the node
	// reboots into its config.
	WipeModeUserDisks WipeMode = "user-disks"
)

// LocalSecretReference names a Secret in the object's own namespace.
type LocalSecretReference struct {
	// name of the Secret.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
}

// SecretKeySelector names one key of a Secret in the object's own namespace.
type SecretKeySelector struct {
	// name of the Secret.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// key inside the Secret's data.
	Key string `json:"key" protobuf:"bytes,2,opt,name=key"`
}
