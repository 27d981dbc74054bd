package harness

// KubeAPIServerPID is kube-apiserver's process id, for measurements such as
// its resident memory in /proc/<pid>/status.
func (cp *ControlPlane) KubeAPIServerPID() int { return cp.kube.Pid() }

// IchorPID is ichor-apiserver's process id when it runs as a binary
// (Options.IchorBinary), and 0 when it runs in this process.
func (cp *ControlPlane) IchorPID() int {
	if cp.ichor == nil || cp.ichor.proc == nil {
		return 0
	}
	return cp.ichor.proc.Pid()
}
