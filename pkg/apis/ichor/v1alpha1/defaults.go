package v1alpha1

import (
	"net"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// Defaults that mirror what Talos itself would choose, so an object reads the
// same before and after the controller has rendered it.
const (
	DefaultTalosAPIPort     = "50000"
	DefaultPodCIDR          = "10.244.0.0/16"
	DefaultServiceCIDR      = "10.96.0.0/12"
	DefaultDNSDomain        = "cluster.local"
	DefaultScanInterval     = 5 * time.Minute
	MaxTalosCredentialLife  = ichor.MaxTalosCredentialLifetime
	MaxReaderTalosconfigAge = ichor.MaxReaderTalosconfigLifetime
)

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_TalosClusterSpec fills in Talos's default networks and CNI.
func SetDefaults_TalosClusterSpec(obj *TalosClusterSpec) {
	n := &obj.Network
	if len(n.PodCIDRs) == 0 {
		n.PodCIDRs = []string{DefaultPodCIDR}
	}
	if len(n.ServiceCIDRs) == 0 {
		n.ServiceCIDRs = []string{DefaultServiceCIDR}
	}
	if n.DNSDomain == "" {
		n.DNSDomain = DefaultDNSDomain
	}
	if n.CNI.Name == "" {
		n.CNI.Name = CNIFlannel
	}
}

// Default claims of a cluster's OIDC trust: the ones most providers issue.
const (
	DefaultUsernameClaim = "email"
	DefaultGroupsClaim   = "groups"
)

// SetDefaults_ClusterAuthentication names the usual claims.
func SetDefaults_ClusterAuthentication(obj *ClusterAuthentication) {
	if obj.UsernameClaim == "" {
		obj.UsernameClaim = DefaultUsernameClaim
	}
	if obj.GroupsClaim == "" {
		obj.GroupsClaim = DefaultGroupsClaim
	}
}

// SetDefaults_ClusterBackup compresses backups unless asked otherwise.
func SetDefaults_ClusterBackup(obj *ClusterBackup) {
	if obj.Compression == "" {
		obj.Compression = BackupCompressionZstd
	}
}

// SetDefaults_TalosMachineSpec adds the Talos API port and, for an assigned
// machine, the worker role.
func SetDefaults_TalosMachineSpec(obj *TalosMachineSpec) {
	obj.Address = WithDefaultPort(obj.Address)
	if obj.ClusterName != "" && obj.Role == "" {
		obj.Role = MachineRoleWorker
	}
}

// SetDefaults_TalosOperationSpec fills a node reset's safe defaults.
func SetDefaults_TalosOperationSpec(obj *TalosOperationSpec) {
	if obj.Type == OperationNodeReset && obj.NodeReset == nil {
		obj.NodeReset = &NodeResetParameters{}
	}
	if obj.Type == OperationCARotation && obj.CARotation == nil {
		obj.CARotation = &CARotationParameters{}
	}
	if obj.Type == OperationKeyRotation && obj.KeyRotation == nil {
		obj.KeyRotation = &KeyRotationParameters{}
	}
}

// DefaultServiceAccountGracePeriod is how long a rotation keeps the old
// service-account key accepted once the new one signs: the age at which a
// kubelet renews a pod's projected token whatever its expiry.
const DefaultServiceAccountGracePeriod = 24 * time.Hour

// SetDefaults_KeyRotationParameters rotates the disk-encryption key unless
// told which, and keeps a rotated service-account key accepted for
// DefaultServiceAccountGracePeriod unless told how long.
func SetDefaults_KeyRotationParameters(obj *KeyRotationParameters) {
	if len(obj.Keys) == 0 {
		obj.Keys = []RotatableKey{KeyDiskEncryption}
	}
	if obj.ServiceAccountGracePeriod == nil && slices.Contains(obj.Keys, KeyServiceAccount) {
		obj.ServiceAccountGracePeriod = &metav1.Duration{Duration: DefaultServiceAccountGracePeriod}
	}
}

// SetDefaults_CARotationParameters rotates the Talos API CA unless told
// otherwise, and the Kubernetes CA only when asked.
func SetDefaults_CARotationParameters(obj *CARotationParameters) {
	if obj.Talos == nil {
		t := true
		obj.Talos = &t
	}
	if obj.Kubernetes == nil {
		k := false
		obj.Kubernetes = &k
	}
}

// SetDefaults_NodeResetParameters makes a reset graceful and complete unless asked otherwise.
func SetDefaults_NodeResetParameters(obj *NodeResetParameters) {
	if obj.Graceful == nil {
		t := true
		obj.Graceful = &t
	}
	if obj.Wipe == "" {
		obj.Wipe = WipeModeAll
	}
}

// SetDefaults_MachineReclaimSpec makes a reclaim a worker's, and an unmanaged
// node's reset graceful and complete, unless asked otherwise.
func SetDefaults_MachineReclaimSpec(obj *MachineReclaimSpec) {
	if obj.Role == "" {
		obj.Role = MachineRoleWorker
	}
	// A managed machine is reset as its deletion resets it: no options.
	if obj.Unmanaged == nil {
		return
	}
	if obj.Wipe == "" {
		obj.Wipe = WipeModeAll
	}
	if obj.Graceful == nil {
		t := true
		obj.Graceful = &t
	}
	obj.Unmanaged.Address = WithDefaultPort(obj.Unmanaged.Address)
}

// SetDefaults_InstallationSettings fills the scan interval and credential lifetimes.
func SetDefaults_InstallationSettings(obj *InstallationSettings) {
	if obj.ScanInterval == nil {
		obj.ScanInterval = &metav1.Duration{Duration: DefaultScanInterval}
	}
	if obj.CredentialLifetimes.TalosCredential == nil {
		obj.CredentialLifetimes.TalosCredential = &metav1.Duration{Duration: MaxTalosCredentialLife}
	}
	if obj.CredentialLifetimes.ReaderTalosconfig == nil {
		obj.CredentialLifetimes.ReaderTalosconfig = &metav1.Duration{Duration: MaxReaderTalosconfigAge}
	}
}

// WithDefaultPort appends the Talos API port to a bare host or IP. Anything it
// cannot read as a host is returned unchanged for validation to report.
func WithDefaultPort(address string) string {
	if address == "" {
		return address
	}
	if _, _, err := net.SplitHostPort(address); err == nil {
		return address
	}
	host := address
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return address
	}
	return net.JoinHostPort(host, DefaultTalosAPIPort)
}
