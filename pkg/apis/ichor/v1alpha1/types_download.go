package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:conversion-gen:explicit-from=net/url.Values
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// DownloadOptions are the query parameters of the download subresources
// (talosmachines/etcd-snapshot, …), which stream a file from a node.
type DownloadOptions struct {
	metav1.TypeMeta `json:",inline"`

	// dryRun is refused: a download has effects a dry run could not undo
	// (a Talos credential is issued, an Event is recorded).
	// +optional
	// +listType=atomic
	DryRun []string `json:"dryRun,omitempty"`
}
