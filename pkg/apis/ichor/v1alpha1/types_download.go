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
	DryRun []string `json:"dryRun,omitempty" protobuf:"bytes,1,rep,name=dryRun"`
}

// +k8s:conversion-gen:explicit-from=net/url.Values
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// PacketCaptureOptions are the query parameters of talosmachines/packet-capture,
// which streams a pcap capture of one of the node's links for a bounded time.
type PacketCaptureOptions struct {
	metav1.TypeMeta `json:",inline"`

	// dryRun is refused: a capture has effects a dry run could not undo.
	// +optional
	// +listType=atomic
	DryRun []string `json:"dryRun,omitempty" protobuf:"bytes,1,rep,name=dryRun"`
	// interface is the link to capture on, as the node names it (eth0).
	Interface string `json:"interface" protobuf:"bytes,2,opt,name=interface"`
	// promiscuous puts the link in promiscuous mode while capturing.
	// +optional
	Promiscuous bool `json:"promiscuous,omitempty" protobuf:"varint,3,opt,name=promiscuous"`
	// snapLength is the most bytes kept of each packet; 0 or unset lets the
	// node decide (Talos keeps 4096).
	// +optional
	SnapLength int64 `json:"snapLength,omitempty" protobuf:"varint,4,opt,name=snapLength"`
	// durationSeconds is how long the capture runs before the stream ends,
	// 1 to 3600; 10 when unset. Captures longer than kube-apiserver's
	// request timeout (one minute by default) need it raised.
	// +optional
	DurationSeconds int64 `json:"durationSeconds,omitempty" protobuf:"varint,5,opt,name=durationSeconds"`
}
