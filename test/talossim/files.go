package talossim

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// bootIDPath is the file talosctl reads to tell that a node rebooted (`talosctl reboot --wait`).
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// Read streams a file of the node's filesystem, as `talosctl read` shows it. The simulator has one
// file, the kernel's boot ID, which changes at every boot; any other path answers NotFound with the
// message of Talos's os.Stat.
func (s *machineServer) Read(in *machine.ReadRequest, srv machine.MachineService_ReadServer) error {
	n := s.node

	n.mu.Lock()
	stopped, bootID := n.stopped, n.bootID
	n.mu.Unlock()

	if stopped {
		return errNodeStopped
	}

	if in.GetPath() != bootIDPath {
		return status.Errorf(codes.NotFound, "stat %s: no such file or directory", in.GetPath())
	}

	return srv.Send(&common.Data{Bytes: []byte(bootID + "\n")})
}

// BootID returns the node's current boot ID, the content of /proc/sys/kernel/random/boot_id.
func (n *Node) BootID() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.bootID
}
