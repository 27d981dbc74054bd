package trust

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestControllerTrustAndDownloads: a Ready 3+2 cluster comes to trust an
// OpenID provider and has its kubelets' serving certificates approved after
// a check of each node over its Talos API; Ichor signs Talos credentials of
// the least role a request needs, and streams what a node holds (an etcd
// snapshot, a support bundle, a packet capture) through kube-apiserver.
func TestControllerTrustAndDownloads(t *testing.T) {
	d := itest.NewDemoCluster(t)
	t.Run("three control planes and two workers become Ready", d.BecomesReady)
	t.Run("the cluster trusts the OpenID provider, one control plane at a time, and people reach it as themselves", d.OIDCTrust)
	t.Run("kubelet serving certificates are approved after checking each node's Talos API", d.KubeletServing)
	t.Run("Talos credential requests are signed for the least role, or denied, and deleted", d.CredentialRequests)
	t.Run("an etcd snapshot streams through kube-apiserver and ichor-apiserver", d.EtcdSnapshot)
	t.Run("a support bundle streams as a zip archive", d.SupportBundle)
	t.Run("a packet capture streams as a pcap file for its duration", d.PacketCapture)
	t.Run("a packet capture the node cuts fails for the client instead of ending short", d.PacketCaptureCut)
	t.Run("a reader talosconfig works with talosctl and reads only", d.ReaderTalosconfig)
	t.Run("ichor download saves whole files only, and ichor status shows the cluster", d.CLIDownloads)
}
