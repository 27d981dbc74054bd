package ichor

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// DownloadOptions are the query parameters of the download subresources.
type DownloadOptions struct {
	metav1.TypeMeta

	// DryRun is refused.
	DryRun []string
}
