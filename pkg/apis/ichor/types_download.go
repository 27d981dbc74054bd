package ichor

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// DownloadOptions are the query parameters of the download subresources.
type DownloadOptions struct {
	metav1.TypeMeta

	// DryRun is refused.
	DryRun []string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// PacketCaptureOptions are the query parameters of talosmachines/packet-capture.
type PacketCaptureOptions struct {
	metav1.TypeMeta

	// DryRun is refused.
	DryRun []string
	// Interface is the link to capture on.
	Interface string
	// Promiscuous puts the link in promiscuous mode while capturing.
	Promiscuous bool
	// SnapLength is the most bytes kept of each packet; 0 lets the node decide.
	SnapLength int64
	// DurationSeconds is how long the capture runs; 0 means the default.
	DurationSeconds int64
}
