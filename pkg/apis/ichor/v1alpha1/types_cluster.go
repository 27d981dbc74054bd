package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:method=UpdateAuthentication,verb=update,subresource=authentication
// +genclient:method=Override,verb=create,subresource=override,input=Override,result=TalosCluster
// (cilium-values and secret-references have no typed methods: the apply
// configuration generator derives Go names from subresource names and cannot
// spell hyphenated ones; use the REST client's SubResource for them.)
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosCluster is a desired Talos Linux cluster: its versions, endpoint,
// network and the Secret holding its secrets bundle.
type TalosCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TalosClusterSpec   `json:"spec"`
	Status TalosClusterStatus `json:"status,omitempty"`
}

// TalosClusterSpec is the desired state of a Talos cluster.
type TalosClusterSpec struct {
	// talosVersion is the Talos release the cluster runs, as a semantic version with a leading v (v1.13.0).
	TalosVersion string `json:"talosVersion"`
	// kubernetesVersion is the Kubernetes release, as a semantic version with a leading v (v1.37.2).
	KubernetesVersion string `json:"kubernetesVersion"`
	// controlPlane describes how the Kubernetes API of the cluster is reached.
	ControlPlane ControlPlaneSpec `json:"controlPlane"`
	// network holds the cluster's pod and service networks and its CNI.
	// +optional
	Network ClusterNetwork `json:"network,omitempty"`
	// ciliumValues are Helm values for Cilium as YAML, used when network.cni.name is cilium.
	// +optional
	CiliumValues string `json:"ciliumValues,omitempty"`
	// secretsRef names the Secret holding the cluster's secrets bundle. When empty the
	// controller generates the bundle into a Secret named <cluster>-secrets.
	// +optional
	SecretsRef *LocalSecretReference `json:"secretsRef,omitempty"`
	// authentication is the OIDC issuer the cluster's kube-apiserver trusts.
	// +optional
	Authentication *ClusterAuthentication `json:"authentication,omitempty"`
	// security holds opt-in hardening options.
	// +optional
	Security ClusterSecurity `json:"security,omitempty"`
	// paused stops the controller from changing any machine of this cluster.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// ControlPlaneSpec describes the cluster's control-plane endpoint.
type ControlPlaneSpec struct {
	// endpoint is the https URL of the cluster's Kubernetes API (https://10.5.0.2:6443).
	Endpoint string `json:"endpoint"`
}

// ClusterNetwork holds the cluster's networks.
type ClusterNetwork struct {
	// podCIDRs are the networks pod addresses come from.
	// +optional
	// +listType=atomic
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	// serviceCIDRs are the networks service addresses come from.
	// +optional
	// +listType=atomic
	ServiceCIDRs []string `json:"serviceCIDRs,omitempty"`
	// dnsDomain is the cluster's DNS domain.
	// +optional
	DNSDomain string `json:"dnsDomain,omitempty"`
	// cni selects the cluster's network plugin.
	// +optional
	CNI CNISpec `json:"cni,omitempty"`
}

// CNIName names a network plugin Ichor can install.
// +enum
type CNIName string

const (
	// CNIFlannel is Talos's default network plugin.
	CNIFlannel CNIName = "flannel"
	// CNICilium is installed with the cluster's ciliumValues.
	CNICilium CNIName = "cilium"
	// CNINone installs no network plugin; the user brings one.
	CNINone CNIName = "none"
)

// CNISpec selects the network plugin.
type CNISpec struct {
	// name of the plugin: flannel, cilium or none.
	// +optional
	Name CNIName `json:"name,omitempty"`
}

// ClusterAuthentication is the OIDC trust of the cluster's kube-apiserver.
type ClusterAuthentication struct {
	// issuerURL is the https URL of the OIDC issuer.
	IssuerURL string `json:"issuerURL"`
	// clientID is the audience tokens must carry.
	ClientID string `json:"clientID"`
	// usernameClaim is the claim used as the user name.
	// +optional
	UsernameClaim string `json:"usernameClaim,omitempty"`
	// groupsClaim is the claim used as the user's groups.
	// +optional
	GroupsClaim string `json:"groupsClaim,omitempty"`
}

// ClusterSecurity holds opt-in hardening options.
type ClusterSecurity struct {
	// kubeletServingCertificates makes kubelets request serving certificates that Ichor approves.
	// +optional
	KubeletServingCertificates KubeletServingCertificates `json:"kubeletServingCertificates,omitempty"`
}

// KubeletServingCertificates configures kubelet serving certificates.
type KubeletServingCertificates struct {
	// enabled turns on serverTLSBootstrap on every kubelet and Ichor's approver.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// verifyFromAPIServer makes kube-apiserver verify kubelet serving certificates
	// once every machine holds one.
	// +optional
	VerifyFromAPIServer bool `json:"verifyFromAPIServer,omitempty"`
}

// ClusterPhase summarises a cluster's state for people reading a table.
// +enum
type ClusterPhase string

// ClusterConditionKubeletServingVerified is the TalosCluster condition that,
// while True, has control planes rendered with kube-apiserver verifying
// kubelets against the cluster CA. The kubelet serving approver sets it once
// every machine had a CA-signed serving certificate, and keeps it (a latch).
const ClusterConditionKubeletServingVerified = "KubeletServingVerified"

const (
	ClusterPhasePending      ClusterPhase = "Pending"
	ClusterPhaseProvisioning ClusterPhase = "Provisioning"
	ClusterPhaseReady        ClusterPhase = "Ready"
	ClusterPhaseDegraded     ClusterPhase = "Degraded"
	ClusterPhaseDeleting     ClusterPhase = "Deleting"
)

// TalosClusterStatus is the observed state of a Talos cluster, written by the controller.
type TalosClusterStatus struct {
	// phase summarises the conditions.
	// +optional
	Phase ClusterPhase `json:"phase,omitempty"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: SecretsReady, MachinesReady, Bootstrapped, KubernetesAPIReady and others.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// override is a safety check the next change may go past, granted
	// through the override subresource; cleared when used.
	// +optional
	Override *OverrideStatus `json:"override,omitempty"`
	// machines counts the cluster's machines.
	// +optional
	Machines MachineCounts `json:"machines,omitempty"`
	// talosVersion is the lowest Talos version running on the cluster's machines.
	// +optional
	TalosVersion string `json:"talosVersion,omitempty"`
	// kubernetesVersion is the Kubernetes version the control plane serves.
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// bootstrappedAt is when etcd was bootstrapped on the first control plane.
	// +optional
	BootstrappedAt *metav1.Time `json:"bootstrappedAt,omitempty"`
}

// MachineCounts counts a cluster's machines.
type MachineCounts struct {
	// total machines in the cluster.
	Total int32 `json:"total"`
	// ready machines.
	Ready int32 `json:"ready"`
	// controlPlanes in the cluster.
	ControlPlanes int32 `json:"controlPlanes"`
	// workers in the cluster.
	Workers int32 `json:"workers"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TalosClusterList is a list of TalosCluster objects.
type TalosClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []TalosCluster `json:"items"`
}
