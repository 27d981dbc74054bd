package talos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// InstallerError is an upgrade the node's installer refused or failed: it
// exited non-zero. The node runs on as it was.
type InstallerError struct {
	// ExitCode is the installer's exit code.
	ExitCode int32
	// Output is the installer's last messages, which say why.
	Output []string
}

func (e *InstallerError) Error() string {
	return fmt.Sprintf("the installer exited with code %d: %s", e.ExitCode, strings.Join(e.Output, "; "))
}

// systemContainerd is the containerd an upgrade's installer is pulled into
// and run from: `talosctl upgrade`'s default (--namespace system).
var systemContainerd = &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}

// installerOutputLines bounds the installer messages an InstallerError keeps.
const installerOutputLines = 5

// Version implements Node with the call `talosctl version` makes.
func (n *machineryNode) Version(ctx context.Context) (string, error) {
	resp, err := n.c.Version(ctx)
	if err != nil {
		return "", n.v.explain("read Talos version", err)
	}
	for _, m := range resp.GetMessages() {
		if tag := m.GetVersion().GetTag(); tag != "" {
			return tag, nil
		}
	}
	return "", fmt.Errorf("the node at %s answered without a version", n.v.address)
}

// PullImage implements Node with ImageService.Pull into the system
// containerd, as `talosctl upgrade` v1.13 pulls the installer first.
func (n *machineryNode) PullImage(ctx context.Context, ref string) error {
	stream, err := n.c.ImageClient.Pull(ctx, &machineapi.ImageServicePullRequest{Containerd: systemContainerd, ImageRef: ref})
	if err == nil {
		for {
			_, err = stream.Recv()
			if err != nil {
				break
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
	if status.Code(err) == codes.Unimplemented {
		// A node before v1.13 has the MachineService pull only.
		if err = n.c.ImagePull(ctx, common.ContainerdNamespace_NS_SYSTEM, ref); err == nil { //nolint:staticcheck // the legacy API is what older nodes serve
			return nil
		}
	}
	return n.v.explain("pull image "+ref, err)
}

// Upgrade implements Node with LifecycleService.Upgrade, as `talosctl
// upgrade` v1.13 calls it: the installer writes the new version to the
// system disk and the node runs on; the next reboot starts the new version.
func (n *machineryNode) Upgrade(ctx context.Context, image string) error {
	stream, err := n.c.LifecycleClient.Upgrade(ctx, &machineapi.LifecycleServiceUpgradeRequest{
		Containerd: systemContainerd,
		Source:     &machineapi.InstallArtifactsSource{ImageName: image},
	})
	if err != nil {
		return n.v.explain("upgrade to "+image, err)
	}
	var output []string
	exit := int32(-1)
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n.v.explain("upgrade to "+image, err)
		}
		switch p := resp.GetProgress().GetResponse().(type) {
		case *machineapi.LifecycleServiceInstallProgress_Message:
			output = append(output, p.Message)
			if len(output) > installerOutputLines {
				output = output[1:]
			}
		case *machineapi.LifecycleServiceInstallProgress_ExitCode:
			exit = p.ExitCode
		}
	}
	switch exit {
	case 0:
		return nil
	case -1:
		return fmt.Errorf("upgrade to %s at %s: the stream ended without the installer's exit code", image, n.v.address)
	default:
		return &InstallerError{ExitCode: exit, Output: output}
	}
}

// UpgradeLegacy implements Node with MachineService.Upgrade, which nodes
// before v1.13 serve: the node installs image and reboots by itself.
func (n *machineryNode) UpgradeLegacy(ctx context.Context, image string) error {
	_, err := n.c.UpgradeWithOptions(ctx, client.WithUpgradeImage(image)) //nolint:staticcheck // the API of nodes before v1.13
	if err != nil {
		return n.v.explain("upgrade (legacy) to "+image, err)
	}
	return nil
}

// ForfeitEtcdLeadership implements Node with the call `talosctl etcd
// forfeit-leadership` makes.
func (n *machineryNode) ForfeitEtcdLeadership(ctx context.Context) error {
	if _, err := n.c.EtcdForfeitLeadership(ctx, &machineapi.EtcdForfeitLeadershipRequest{}); err != nil {
		return n.v.explain("forfeit etcd leadership", err)
	}
	return nil
}
