package talossim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// ServiceLogLines is how many lines the simulated log of every service or container holds.
const ServiceLogLines = 10

// Service states as machined names them.
const (
	serviceRunning   = "Running"
	servicePreparing = "Preparing"
	serviceFinished  = "Finished"
	serviceFailed    = "Failed"
)

// simService is one system service in a given node state.
type simService struct {
	id, state, msg string
}

// servicesLocked returns the node's services, sorted by ID: apid, machined and udevd always;
// containerd, cri and kubelet once configured; trustd and etcd on control planes, etcd Running only
// while the node's member is in the cluster.
func (n *Node) servicesLocked() []simService {
	running := func(id string) simService { return simService{id, serviceRunning, "Health check successful"} }

	svcs := []simService{running("apid"), {"machined", serviceRunning, "Service started as goroutine"}, running("udevd")}

	if n.configuredLocked() {
		svcs = append(svcs, running("containerd"), running("cri"), running("kubelet"))

		if n.isControlPlaneLocked() {
			svcs = append(svcs, running("trustd"), n.etcdServiceLocked())
		}
	}

	slices.SortFunc(svcs, func(a, b simService) int { return strings.Compare(a.id, b.id) })

	return svcs
}

// etcdServiceLocked is the etcd service's state on a control plane.
func (n *Node) etcdServiceLocked() simService {
	_, member := n.localMemberLocked()

	switch {
	case member:
		return simService{"etcd", serviceRunning, "Health check successful"}
	case n.etcdLocal.stopped:
		return simService{"etcd", serviceFinished, "Service finished successfully"}
	case n.etcdLocal.memberID != 0:
		return simService{"etcd", serviceFailed, "the member has been permanently removed from the cluster"}
	default:
		return simService{"etcd", servicePreparing, "Running pre state"}
	}
}

// ServiceList reports the node's services with their state, last event and health.
func (s *machineServer) ServiceList(context.Context, *emptypb.Empty) (*machine.ServiceListResponse, error) {
	n := s.node

	n.mu.Lock()
	svcs := n.servicesLocked()
	since := timestamppb.New(n.bootTime)
	n.mu.Unlock()

	infos := make([]*machine.ServiceInfo, 0, len(svcs))

	for _, svc := range svcs {
		health := &machine.ServiceHealth{Unknown: true}
		if svc.state == serviceRunning {
			health = &machine.ServiceHealth{Healthy: true, LastChange: since}
		}

		infos = append(infos, &machine.ServiceInfo{
			Id:     svc.id,
			State:  svc.state,
			Events: &machine.ServiceEvents{Events: []*machine.ServiceEvent{{Msg: svc.msg, State: svc.state, Ts: since}}},
			Health: health,
		})
	}

	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{{Services: infos}}}, nil
}

// containersLocked lists the simulated containers of a containerd namespace: system services that run
// as containers, and the control plane's static pods once its etcd member is up.
func (n *Node) containersLocked(namespace string, driver common.ContainerDriver) []*machine.ContainerInfo {
	var out []*machine.ContainerInfo

	containerState := "RUNNING" // containerd's wording; CRI says CONTAINER_RUNNING
	if driver == common.ContainerDriver_CRI {
		containerState = "CONTAINER_RUNNING"
	}

	add := func(id, podID, name, image string) {
		out = append(out, &machine.ContainerInfo{
			Namespace:  namespace,
			Id:         id,
			InternalId: id,
			PodId:      podID,
			Name:       name,
			Image:      image,
			Pid:        uint32(1000 + 100*len(out)), //nolint:gosec // small
			Status:     containerState,
		})
	}

	_, etcdUp := n.localMemberLocked()

	switch namespace {
	case constants.SystemContainerdNamespace:
		for _, svc := range n.servicesLocked() {
			if svc.state == serviceRunning && slices.Contains([]string{"apid", "etcd", "kubelet", "trustd"}, svc.id) {
				add(svc.id, "", svc.id, "siderolabs/"+svc.id+":"+n.sw.running)
			}
		}
	case constants.K8sContainerdNamespace:
		if !etcdUp {
			break
		}

		host := n.hostnameLocked()
		for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			pod := "kube-system/" + c + "-" + host
			add(pod+":"+c, pod, c, "kubernetes/"+c+":v"+constants.DefaultKubernetesVersion)
		}
	}

	return out
}

// Containers lists the simulated containers of a namespace (see containersLocked).
func (s *machineServer) Containers(_ context.Context, in *machine.ContainersRequest) (*machine.ContainersResponse, error) {
	if err := checkInspector(in.GetNamespace(), in.GetDriver()); err != nil {
		return nil, err
	}

	n := s.node

	n.mu.Lock()
	containers := n.containersLocked(in.GetNamespace(), in.GetDriver())
	n.mu.Unlock()

	return &machine.ContainersResponse{Messages: []*machine.Container{{Containers: containers}}}, nil
}

// checkInspector mirrors the namespace/driver checks Talos makes before inspecting containers.
func checkInspector(namespace string, driver common.ContainerDriver) error {
	switch {
	case namespace == "":
		return status.Errorf(codes.InvalidArgument, "namespace can't be empty")
	case driver == common.ContainerDriver_CRI && namespace != constants.K8sContainerdNamespace:
		return fmt.Errorf("CRI inspector is supported only for K8s namespace")
	case driver != common.ContainerDriver_CRI && driver != common.ContainerDriver_CONTAINERD:
		return status.Errorf(codes.InvalidArgument, "unsupported driver %q", driver)
	}

	return nil
}

// logLines is the deterministic log of a service or container.
func logLines(id string) []string {
	lines := make([]string, ServiceLogLines)
	for i := range lines {
		lines[i] = fmt.Sprintf("[talossim] %s: simulated log line %d of %d\n", id, i+1, ServiceLogLines)
	}

	return lines
}

// Logs streams the log of a service (namespace "system", or id "kubelet") or of a listed container;
// TailLines >= 0 keeps only the last lines (0: none, like Talos), negative sends all. An unknown log is
// NotFound. With Follow the stream then stays open (no new lines are ever written) until the client
// cancels or the API goes down.
func (s *machineServer) Logs(in *machine.LogsRequest, srv machine.MachineService_LogsServer) error {
	n := s.node

	n.mu.Lock()
	known, err := n.logKnownLocked(in)
	n.mu.Unlock()

	if err != nil {
		return err
	}

	if !known {
		if in.GetNamespace() == constants.SystemContainerdNamespace || in.GetId() == "kubelet" {
			return status.Errorf(codes.NotFound, "log %q was not registered", in.GetId())
		}

		return status.Errorf(codes.NotFound, "container %q not found", in.GetId())
	}

	lines := logLines(in.GetId())
	if tail := int(in.GetTailLines()); tail >= 0 && tail < len(lines) {
		lines = lines[len(lines)-tail:]
	}

	for _, line := range lines {
		if err = srv.Send(&common.Data{Bytes: []byte(line)}); err != nil {
			return err
		}
	}

	if in.GetFollow() {
		return s.waitStreamEnd(srv.Context(), nil)
	}

	return nil
}

// logKnownLocked reports whether the node has the log a Logs request asks for.
func (n *Node) logKnownLocked(in *machine.LogsRequest) (bool, error) {
	if in.GetNamespace() == constants.SystemContainerdNamespace || in.GetId() == "kubelet" {
		return slices.ContainsFunc(n.servicesLocked(), func(svc simService) bool { return svc.id == in.GetId() }), nil
	}

	if err := checkInspector(in.GetNamespace(), in.GetDriver()); err != nil {
		return false, err
	}

	return slices.ContainsFunc(n.containersLocked(in.GetNamespace(), in.GetDriver()), func(c *machine.ContainerInfo) bool { return c.GetId() == in.GetId() }), nil
}

// kernelMessages is the simulated kernel ring buffer of a boot: facility, priority, message.
var kernelMessages = [][3]string{
	{"kern", "notice", "Linux version 6.18.0-talos (talossim) #1 SMP"},
	{"kern", "info", "Command line: talos.platform=metal console=ttyS0"},
	{"kern", "info", "Memory: 4096000K/4194304K available"},
	{"kern", "info", "virtio_net virtio1 eth0: renamed from enp0s3"},
	{"kern", "warning", "TSC clock source is unstable"},
	{"user", "info", "[talos] task startMachined (1/1): done"},
	{"user", "info", "[talos] service[apid](Running): Health check successful"},
}

// kernelLogStep is the simulated time between kernel messages after boot.
const kernelLogStep = 137 * time.Millisecond

// Dmesg streams the node's kernel log of the current boot in machined's line format, one message per
// chunk. Tail starts at the end of the buffer (so without Follow nothing is sent); Follow keeps the
// stream open until the client cancels or the API goes down.
func (s *machineServer) Dmesg(in *machine.DmesgRequest, srv machine.MachineService_DmesgServer) error {
	n := s.node

	n.mu.Lock()
	boot := n.bootTime
	n.mu.Unlock()

	if !in.GetTail() {
		for i, m := range kernelMessages {
			ts := boot.Add(time.Duration(i) * kernelLogStep).UTC()

			line := fmt.Appendf(nil, "%s: %7s: [%s]: %s", m[0], m[1], ts.Format(time.RFC3339Nano), m[2])
			if err := srv.Send(&common.Data{Bytes: line}); err != nil {
				return err
			}
		}
	}

	if in.GetFollow() {
		return s.waitStreamEnd(srv.Context(), nil)
	}

	return nil
}

// ServiceRestart restarts a service, as `talosctl service ID restart` asks: the kubelet (the one
// service here that allows it through the API) starts a new run; other services refuse, and unknown
// ones are not defined, in Talos's words.
func (s *machineServer) ServiceRestart(_ context.Context, in *machine.ServiceRestartRequest) (*machine.ServiceRestartResponse, error) {
	n := s.node

	n.mu.Lock()
	defer n.mu.Unlock()

	if !slices.ContainsFunc(n.servicesLocked(), func(svc simService) bool { return svc.id == in.GetId() }) {
		return nil, fmt.Errorf("service %q not defined", in.GetId())
	}

	if in.GetId() != "kubelet" {
		return nil, fmt.Errorf("service %q doesn't support restart via API", in.GetId())
	}

	n.restartKubeletLocked()

	return &machine.ServiceRestartResponse{Messages: []*machine.ServiceRestart{{Resp: fmt.Sprintf("Service %q restarted", in.GetId())}}}, nil
}
