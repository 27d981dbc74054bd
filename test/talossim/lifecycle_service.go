package talossim

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/config"
)

// Registry is the container registry the simulated nodes pull from: the image references it serves.
// Nodes of one test share it. A nil Registry serves every installer reference whose tag is a Talos
// version (see installerVersion).
type Registry struct {
	mu     sync.Mutex
	images map[string]bool
}

// NewRegistry serves exactly refs.
func NewRegistry(refs ...string) *Registry {
	r := &Registry{images: map[string]bool{}}
	for _, ref := range refs {
		r.images[ref] = true
	}
	return r
}

// Add makes refs pullable.
func (r *Registry) Add(refs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()

	for _, ref := range refs {
		r.images[ref] = true
	}
}

// serves reports whether ref can be pulled.
func (r *Registry) serves(ref string) bool {
	if r == nil {
		_, err := installerVersion(ref)

		return err == nil
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	return r.images[ref]
}

// pullLayers is how many layers a simulated pull reports progress for.
const pullLayers = 3

// imageServer implements the part of ImageService that upgrades need: Pull into the node's containerd.
type imageServer struct {
	machine.UnimplementedImageServiceServer

	node *Node
}

// Pull pulls ref into the node's image store, streaming layer progress and then the image name, as
// containerd's pull does. A reference the registry does not serve fails like an unresolvable one.
func (s *imageServer) Pull(in *machine.ImageServicePullRequest, srv grpc.ServerStreamingServer[machine.ImageServicePullResponse]) error {
	ref := in.GetImageRef()
	if ref == "" {
		return status.Error(codes.InvalidArgument, "image reference is required")
	}

	n := s.node

	n.mu.Lock()
	stopped, present := n.stopped, n.images[ref]
	n.mu.Unlock()

	if stopped {
		return errNodeStopped
	}

	if !n.opts.Registry.serves(ref) {
		return status.Errorf(codes.NotFound, "error pulling image %q: failed to resolve reference %q: not found", ref, ref)
	}

	if present {
		return srv.Send(&machine.ImageServicePullResponse{Response: &machine.ImageServicePullResponse_Name{Name: ref}})
	}

	// Downloading takes PullDelay, spread over the layers.
	layerDelay := n.opts.PullDelay / pullLayers

	const layerSize = 16 << 20
	for i := range pullLayers {
		for _, st := range []machine.ImageServicePullLayerProgress_Status{
			machine.ImageServicePullLayerProgress_DOWNLOADING, machine.ImageServicePullLayerProgress_EXTRACT_COMPLETE,
		} {
			offset := int64(0)
			if st == machine.ImageServicePullLayerProgress_EXTRACT_COMPLETE {
				offset = layerSize

				select {
				case <-srv.Context().Done():
					return srv.Context().Err()
				case <-time.After(layerDelay):
				}
			}

			if err := srv.Send(&machine.ImageServicePullResponse{Response: &machine.ImageServicePullResponse_PullProgress{
				PullProgress: &machine.ImageServicePullProgress{
					LayerId:  fmt.Sprintf("sha256:%064x", i+1),
					Progress: &machine.ImageServicePullLayerProgress{Status: st, Offset: offset, Total: layerSize},
				},
			}}); err != nil {
				return err
			}
		}
	}

	n.mu.Lock()
	if n.images == nil {
		n.images = map[string]bool{}
	}

	n.images[ref] = true
	n.mu.Unlock()

	return srv.Send(&machine.ImageServicePullResponse{Response: &machine.ImageServicePullResponse_Name{Name: ref}})
}

// lifecycleServer implements LifecycleService.Upgrade as Talos v1.13 does: the installer container
// writes the new version to the system disk while the node keeps running; nothing reboots. The new
// version runs after the next reboot, which the caller asks for.
type lifecycleServer struct {
	machine.UnimplementedLifecycleServiceServer

	node *Node
}

// Upgrade runs the installer of the source image (installer.go): its output, then its exit code. Like
// Talos it refuses a second install or upgrade while one runs, a node that is not installed, and an image
// that is not in the node's image store; the installer's own failures (its pre-flight check of the
// upgrade path, the faults) end the stream normally, with a non-zero exit code, and install nothing.
// Cancelling the stream kills the installer: nothing is written. The node keeps running its version
// until the next reboot.
func (s *lifecycleServer) Upgrade(in *machine.LifecycleServiceUpgradeRequest, srv grpc.ServerStreamingServer[machine.LifecycleServiceUpgradeResponse]) error {
	n := s.node
	ref := in.GetSource().GetImageName()

	n.mu.Lock()
	switch {
	case n.stopped:
		n.mu.Unlock()

		return errNodeStopped
	case n.lifecycleBusy:
		n.mu.Unlock()

		return status.Error(codes.FailedPrecondition, "another installation/upgrade is already in progress")
	case !n.installed:
		n.mu.Unlock()

		return status.Error(codes.FailedPrecondition, "machine is not installed")
	case ref == "":
		n.mu.Unlock()

		return status.Error(codes.InvalidArgument, "installer image name is required")
	case !n.images[ref]:
		n.mu.Unlock()

		return status.Errorf(codes.Internal, "upgrade failed: installer image %q not found in containerd store: image %q: not found", ref, ref)
	}

	n.lifecycleBusy = true
	run := n.runInstallerLocked(ref, n.sw.running, true)
	n.mu.Unlock()

	defer func() {
		n.mu.Lock()
		n.lifecycleBusy = false
		n.mu.Unlock()
	}()

	send := func(msg string) error {
		return srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
			Response: &machine.LifecycleServiceInstallProgress_Message{Message: msg},
		}})
	}
	exit := func(code int32) error {
		return srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
			Response: &machine.LifecycleServiceInstallProgress_ExitCode{ExitCode: code},
		}})
	}

	for _, line := range run.lines {
		if err := send(line); err != nil {
			return err
		}
	}

	if run.failed() {
		if err := send(run.last); err != nil {
			return err
		}

		return exit(run.code)
	}

	t := time.NewTimer(n.opts.UpgradeDelay)
	defer t.Stop()

	select {
	case <-t.C:
	case <-srv.Context().Done():
		return status.FromContextError(srv.Context().Err()).Err()
	case <-n.stopCh:
		return errNodeStopped
	}

	n.mu.Lock()
	n.sw.installed, n.sw.installedImage = run.version, ref
	n.mu.Unlock()

	if err := send(run.last); err != nil {
		return err
	}

	return exit(0)
}

// upgradeableFrom is the installer's preflight check of the upgrade path, with machinery's table.
func upgradeableFrom(target, host string) error {
	t, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: target})
	if err != nil {
		return err
	}

	h, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: host})
	if err != nil {
		return err
	}

	if err := t.UpgradeableFrom(h); err != nil && !strings.Contains(err.Error(), "are not supported") {
		return err
	}

	return nil
}

// Version returns the Talos version the node runs now.
func (n *Node) Version() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.sw.running
}

// RunningImage returns the installer image the running Talos was installed from (by the install, or the
// last upgrade, that the boot runs), "" while the node runs from its boot media. Two images of one
// version (say, Image Factory schematics) tell apart what a Talos version alone does not.
func (n *Node) RunningImage() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.sw.runningImage
}

// InstallImage returns the installer image the config the node runs names (machine.install.image, or
// UnattendedInstallConfig's installer.image from v1.14), or "" without a config.
func (n *Node) InstallImage() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	if n.active == nil {
		return ""
	}

	return installerImageOf(n.active)
}

// installerImageOf is the installer a config names: its UnattendedInstallConfig's (Talos v1.14 installs
// from that document when the config has one), else machine.install's.
func installerImageOf(cfg config.Provider) string {
	if u := cfg.UnattendedInstallConfig(); u != nil && u.InstallerImage() != "" {
		return u.InstallerImage()
	}

	if m := cfg.Machine(); m != nil {
		return m.Install().Image()
	}

	return ""
}
