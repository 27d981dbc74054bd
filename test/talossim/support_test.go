package talossim

import (
	"context"
	"errors"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// services returns "id=state" for every service ServiceList reports.
func services(t *testing.T, c *client.Client) []string {
	t.Helper()

	resp, err := c.ServiceList(testContext(t))
	if err != nil {
		t.Fatalf("ServiceList: %v", err)
	}

	var out []string

	for _, svc := range resp.GetMessages()[0].GetServices() {
		if len(svc.GetEvents().GetEvents()) == 0 || svc.GetHealth() == nil {
			t.Fatalf("service %s has no events or health: %v", svc.GetId(), svc)
		}

		out = append(out, svc.GetId()+"="+svc.GetState())
	}

	return out
}

// streamLines collects the chunks of a finished common.Data stream.
func streamLines(t *testing.T, s interface{ Recv() (*common.Data, error) }, err error) ([]string, error) {
	t.Helper()

	if err != nil {
		return nil, err
	}

	var lines []string

	for {
		msg, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return lines, nil
		}

		if err != nil {
			return lines, err
		}

		lines = append(lines, string(msg.GetBytes()))
	}
}

func TestServiceList(t *testing.T) {
	t.Parallel()

	cl := newCluster(t)

	maintNode := startNode(t, Options{})
	if got := services(t, pinnedClient(t, maintNode, maintNode.MaintenanceFingerprint())); !slices.Equal(got, []string{"apid=Running", "machined=Running", "udevd=Running"}) {
		t.Fatalf("maintenance services = %v", got)
	}

	_, worker := workerNode(t, cl, Options{})
	if got := services(t, worker); !slices.Equal(got, []string{"apid=Running", "containerd=Running", "cri=Running", "kubelet=Running", "machined=Running", "udevd=Running"}) {
		t.Fatalf("worker services = %v", got)
	}

	n, cp := installedNode(t, cl, Options{})
	want := []string{"apid=Running", "containerd=Running", "cri=Running", "etcd=Preparing", "kubelet=Running", "machined=Running", "trustd=Running", "udevd=Running"}

	if got := services(t, cp); !slices.Equal(got, want) {
		t.Fatalf("control plane services before bootstrap = %v", got)
	}

	if err := cp.Bootstrap(testContext(t), &machineapi.BootstrapRequest{}); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}

	want[3] = "etcd=Running"
	if got := services(t, roleClients(t, n, cl)[role.Reader]); !slices.Equal(got, want) {
		t.Fatalf("control plane services after bootstrap = %v", got)
	}

	wantDenied(t, func() error { _, err := roleClients(t, n, cl)[role.EtcdBackup].ServiceList(testContext(t)); return err }())
}

func TestLogsDmesgContainers(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, admin := bootstrappedNode(t, cl, Options{Hostname: "cp-logs"})
	reader := roleClients(t, n, cl)[role.Reader]

	logs := func(ns string, driver common.ContainerDriver, id string, tail int32) ([]string, error) {
		s, err := reader.Logs(ctx, ns, driver, id, false, tail)

		return streamLines(t, s, err)
	}

	lines, err := logs(constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD, "apid", -1)
	if err != nil || len(lines) != ServiceLogLines || lines[0] != "[talossim] apid: simulated log line 1 of 10\n" {
		t.Fatalf("apid logs = %q, %v", lines, err)
	}

	again, _ := logs(constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD, "apid", -1)
	if !slices.Equal(lines, again) {
		t.Fatal("service logs are not deterministic")
	}

	if tail, err := logs(constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD, "etcd", 3); err != nil ||
		!slices.Equal(tail, logLines("etcd")[ServiceLogLines-3:]) {
		t.Fatalf("etcd tail 3 = %q, %v", tail, err)
	}

	// kubelet logs are service logs whatever the namespace (talosctl logs -k kubelet).
	if kubelet, err := logs(constants.K8sContainerdNamespace, common.ContainerDriver_CRI, "kubelet", -1); err != nil || len(kubelet) != ServiceLogLines {
		t.Fatalf("kubelet logs = %q, %v", kubelet, err)
	}

	_, err = logs(constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD, "nope", -1)
	wantCode(t, err, codes.NotFound, `log "nope" was not registered`)

	_, err = logs(constants.K8sContainerdNamespace, common.ContainerDriver_CRI, "kube-system/nope", -1)
	wantCode(t, err, codes.NotFound, `container "kube-system/nope" not found`)

	// Containers: system services and, with etcd up, the static pods.
	resp, err := reader.Containers(ctx, constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD)
	if err != nil {
		t.Fatalf("Containers: %v", err)
	}

	var ids []string
	for _, c := range resp.GetMessages()[0].GetContainers() {
		ids = append(ids, c.GetId())
	}

	if !slices.Equal(ids, []string{"apid", "etcd", "kubelet", "trustd"}) {
		t.Fatalf("system containers = %v", ids)
	}

	resp, err = reader.Containers(ctx, constants.K8sContainerdNamespace, common.ContainerDriver_CRI)
	if err != nil || len(resp.GetMessages()[0].GetContainers()) != 3 {
		t.Fatalf("k8s containers = %v, %v", resp, err)
	}

	pod := resp.GetMessages()[0].GetContainers()[0]
	if pod.GetId() != "kube-system/kube-apiserver-cp-logs:kube-apiserver" || pod.GetStatus() != "CONTAINER_RUNNING" {
		t.Fatalf("static pod container = %v", pod)
	}

	if podLogs, err := logs(constants.K8sContainerdNamespace, common.ContainerDriver_CRI, pod.GetId(), 1); err != nil || len(podLogs) != 1 {
		t.Fatalf("container logs = %q, %v", podLogs, err)
	}

	_, err = reader.Containers(ctx, "", common.ContainerDriver_CONTAINERD)
	wantCode(t, err, codes.InvalidArgument, "namespace can't be empty")

	// Dmesg in machined's line format; Tail without Follow has nothing to send.
	dmesg := func(follow, tail bool) ([]string, error) {
		s, err := admin.Dmesg(ctx, follow, tail)

		return streamLines(t, s, err)
	}

	kmsg, err := dmesg(false, false)
	if err != nil || len(kmsg) != len(kernelMessages) {
		t.Fatalf("dmesg = %q, %v", kmsg, err)
	}

	format := regexp.MustCompile(`^(kern|user): +(notice|info|warning): \[\d{4}-\d\d-\d\dT[0-9:.]+Z\]: .+$`)
	for _, line := range kmsg {
		if !format.MatchString(line) {
			t.Fatalf("dmesg line %q does not match the Talos format", line)
		}
	}

	if !strings.Contains(kmsg[0], "Linux version") {
		t.Fatalf("first kernel message = %q", kmsg[0])
	}

	if tail, err := dmesg(false, true); err != nil || len(tail) != 0 {
		t.Fatalf("dmesg --tail = %q, %v", tail, err)
	}

	// Follow keeps the stream open until the client cancels.
	followCtx, cancel := context.WithCancel(ctx)

	s, err := admin.Dmesg(followCtx, true, true)
	if err != nil {
		t.Fatal(err)
	}

	cancel()

	if _, err = s.Recv(); client.StatusCode(err) != codes.Canceled {
		t.Fatalf("followed dmesg after cancel: %v", err)
	}
}
