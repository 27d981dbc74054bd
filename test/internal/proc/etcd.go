package proc

import "path/filepath"

// EtcdMemberName is the member name of the single-member etcd EtcdArgs starts.
const EtcdMemberName = "default"

// EtcdDataDir is the data directory of the etcd EtcdArgs starts in dir.
func EtcdDataDir(dir string) string { return filepath.Join(dir, "etcd-data") }

// EtcdArgs are the flags of a single-member test etcd in dir, serving clientURL and peerURL with
// mutual TLS: certFile and keyFile serve both, and only clients with a certificate from caFile get in.
// Test data is thrown away, so it does not fsync.
func EtcdArgs(dir, clientURL, peerURL, caFile, certFile, keyFile string) []string {
	return []string{
		"--name=" + EtcdMemberName,
		"--data-dir=" + EtcdDataDir(dir),
		"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--cert-file=" + certFile, "--key-file=" + keyFile,
		"--trusted-ca-file=" + caFile, "--client-cert-auth",
		"--peer-cert-file=" + certFile, "--peer-key-file=" + keyFile,
		"--peer-trusted-ca-file=" + caFile, "--peer-client-cert-auth",
		"--log-level=warn",
		"--unsafe-no-fsync",
	}
}
