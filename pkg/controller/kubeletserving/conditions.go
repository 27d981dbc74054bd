package kubeletserving

import "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"

// Conditions on a TalosCluster with kubelet serving certificates enabled.
const (
	// ConditionCertificates: every machine has an unexpired kubelet serving
	// certificate recorded. Removed when the option is off.
	ConditionCertificates = "KubeletServingCertificates"
	// ConditionVerified is a latch: set once every machine had a
	// certificate with verifyFromAPIServer on, and kept when a machine
	// joins later; removed when either option is off. While it is True the
	// kube-apiserver verifies kubelets against the cluster CA.
	ConditionVerified = v1alpha1.ClusterConditionKubeletServingVerified
)

// Reasons of those conditions.
const (
	ReasonAllIssued       = "AllIssued"
	ReasonWaiting         = "WaitingForCertificates"
	ReasonNotBootstrapped = "NotBootstrapped"
	ReasonUnreachable     = "KubernetesUnreachable"
)
