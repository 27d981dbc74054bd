package proc

import (
	"path/filepath"
	"strings"
)

// EtcdMemberName is the member name of the single-member etcd EtcdArgs starts.
const EtcdMemberName = "default"

// EtcdDataDir is the data directory of the etcd EtcdArgs starts in dir.
func EtcdDataDir(dir string) string { return filepath.Join(dir, "etcd-data") }

// EtcdArgs are the flags of a single-member test etcd in dir, serving clientURL and peerURL with
// mutual TLS: certFile and keyFile serve both, and only clients with a certificate from caFile get in.
// Test data is thrown away, so it does not fsync.
func EtcdArgs(dir, clientURL, peerURL, caFile, certFile, keyFile string) []string {
	return EtcdMemberArgs(EtcdMember{Name: EtcdMemberName, DataDir: EtcdDataDir(dir), ClientURL: clientURL, PeerURL: peerURL},
		[]EtcdMember{{Name: EtcdMemberName, PeerURL: peerURL}}, caFile, certFile, keyFile)
}

// EtcdMember is one member of a test etcd cluster.
type EtcdMember struct {
	Name, DataDir, ClientURL, PeerURL string
}

// EtcdMemberArgs are the flags of member m of the etcd cluster of members, with mutual TLS between
// members and for clients as EtcdArgs has it. A member that restarts with its data dir rejoins.
func EtcdMemberArgs(m EtcdMember, members []EtcdMember, caFile, certFile, keyFile string) []string {
	initial := make([]string, 0, len(members))
	for _, o := range members {
		initial = append(initial, o.Name+"="+o.PeerURL)
	}
	return []string{
		"--name=" + m.Name,
		"--data-dir=" + m.DataDir,
		"--listen-client-urls=" + m.ClientURL, "--advertise-client-urls=" + m.ClientURL,
		"--listen-peer-urls=" + m.PeerURL, "--initial-advertise-peer-urls=" + m.PeerURL,
		"--initial-cluster=" + strings.Join(initial, ","),
		"--cert-file=" + certFile, "--key-file=" + keyFile,
		"--trusted-ca-file=" + caFile, "--client-cert-auth",
		"--peer-cert-file=" + certFile, "--peer-key-file=" + keyFile,
		"--peer-trusted-ca-file=" + caFile, "--peer-client-cert-auth",
		"--log-level=warn",
		"--unsafe-no-fsync",
	}
}
