package talossim

import (
	"bytes"
	"context"
	"io"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// roleCase is one MachineService method of the role table: the roles Talos allows, and a call that is
// harmless when allowed (nil call for allowed roles: the allowed path is exercised by its own test).
type roleCase struct {
	method  string
	allowed []role.Role
	call    func(ctx context.Context, c *client.Client) error
	// destructive calls are only made with denied roles.
	destructive bool
}

// roleCases covers every MachineService method this slice adds, with Talos v1.13's role rules.
var roleCases = []roleCase{
	{method: "Reboot", allowed: []role.Role{role.Admin, role.Operator}, destructive: true,
		call: func(ctx context.Context, c *client.Client) error { return c.Reboot(ctx) }},
	{method: "Shutdown", allowed: []role.Role{role.Admin, role.Operator}, destructive: true,
		call: func(ctx context.Context, c *client.Client) error { return c.Shutdown(ctx) }},
	{method: "Reset", allowed: []role.Role{role.Admin}, // invalid wipe combination: rejected after authorization
		call: func(ctx context.Context, c *client.Client) error {
			return c.ResetGeneric(ctx, &machineapi.ResetRequest{Mode: machineapi.ResetRequest_SYSTEM_DISK, UserDisksToWipe: []string{"/dev/sda"}})
		}},
	{method: "Upgrade", allowed: []role.Role{role.Admin}, // untagged image: rejected after authorization
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage("siderolabs/installer"))

			return err
		}},
	{method: "Bootstrap", allowed: []role.Role{role.Admin}, // already bootstrapped: AlreadyExists
		call: func(ctx context.Context, c *client.Client) error {
			return c.Bootstrap(ctx, &machineapi.BootstrapRequest{})
		}},
	{method: "EtcdMemberList", allowed: []role.Role{role.Admin, role.Operator, role.Reader, role.EtcdBackup},
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{})

			return err
		}},
	{method: "EtcdLeaveCluster", allowed: []role.Role{role.Admin}, destructive: true,
		call: func(ctx context.Context, c *client.Client) error {
			return c.EtcdLeaveCluster(ctx, &machineapi.EtcdLeaveClusterRequest{})
		}},
	{method: "EtcdRemoveMemberByID", allowed: []role.Role{role.Admin}, // unknown member: NotFound
		call: func(ctx context.Context, c *client.Client) error {
			return c.EtcdRemoveMemberByID(ctx, &machineapi.EtcdRemoveMemberByIDRequest{MemberId: 1})
		}},
	{method: "EtcdForfeitLeadership", allowed: []role.Role{role.Admin}, // single member: refused
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.EtcdForfeitLeadership(ctx, &machineapi.EtcdForfeitLeadershipRequest{})

			return err
		}},
	{method: "EtcdDefragment", allowed: []role.Role{role.Admin, role.Operator},
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.EtcdDefragment(ctx)

			return err
		}},
	{method: "EtcdStatus", allowed: []role.Role{role.Admin, role.Operator, role.Reader, role.EtcdBackup},
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.EtcdStatus(ctx)

			return err
		}},
	{method: "EtcdSnapshot", allowed: []role.Role{role.Admin, role.Operator, role.EtcdBackup},
		call: func(ctx context.Context, c *client.Client) error {
			_, err := snapshot(ctx, c)

			return err
		}},
	{method: "EtcdRecover", allowed: []role.Role{role.Admin},
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.EtcdRecover(ctx, bytes.NewReader([]byte("not a snapshot")))

			return err
		}},
	{method: "PacketCapture", allowed: []role.Role{role.Admin, role.Operator},
		call: func(ctx context.Context, c *client.Client) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()

			r, err := c.PacketCapture(ctx, &machineapi.PacketCaptureRequest{Interface: "eth0"})
			if err != nil {
				return err
			}

			defer r.Close() //nolint:errcheck

			_, err = io.ReadFull(r, make([]byte, pcapHeaderSize))

			return err
		}},
	{method: "ServiceList", allowed: []role.Role{role.Admin, role.Operator, role.Reader},
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.ServiceList(ctx)

			return err
		}},
	{method: "Logs", allowed: []role.Role{role.Admin, role.Operator, role.Reader},
		call: func(ctx context.Context, c *client.Client) error {
			s, err := c.Logs(ctx, constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD, "apid", false, -1)

			return recvErr(s, err)
		}},
	{method: "Dmesg", allowed: []role.Role{role.Admin, role.Operator, role.Reader},
		call: func(ctx context.Context, c *client.Client) error {
			s, err := c.Dmesg(ctx, false, false)

			return recvErr(s, err)
		}},
	{method: "Containers", allowed: []role.Role{role.Admin, role.Operator, role.Reader},
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.Containers(ctx, constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD)

			return err
		}},
	{method: "Events", allowed: []role.Role{role.Admin, role.Operator, role.Reader},
		call: func(ctx context.Context, c *client.Client) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()

			s, err := c.Events(ctx)

			return recvErr(s, err)
		}},
	{method: "Kubeconfig", allowed: []role.Role{role.Admin},
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.Kubeconfig(ctx)

			return err
		}},
}

func TestRoleTable(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	cl := newCluster(t)
	n, _ := bootstrappedNode(t, cl, Options{})
	clients := roleClients(t, n, cl)

	for _, tc := range roleCases {
		if _, ok := rules["/machine.MachineService/"+tc.method]; !ok {
			t.Fatalf("%s is missing from the rules table", tc.method)
		}

		for _, r := range testRoles {
			allowed := role.MakeSet(tc.allowed...).Includes(r)
			if allowed && tc.destructive {
				continue
			}

			err := tc.call(ctx, clients[r])

			if allowed {
				wantNotDenied(t, tc.method+" as "+string(r), err)
			} else {
				if client.StatusCode(err) != codes.PermissionDenied {
					t.Fatalf("%s as %s: want PermissionDenied, got %v", tc.method, r, err)
				}

				wantDenied(t, err)
			}
		}
	}

	// The denied destructive calls changed nothing.
	wantHistory(t, n, installedHistory...)

	if !n.etcd.Bootstrapped() || len(n.etcd.Members()) != 1 {
		t.Fatalf("etcd members after the role table: %v", n.etcd.Members())
	}
}
