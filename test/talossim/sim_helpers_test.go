package talossim

import (
	"context"
	"io"
	"testing"

	"google.golang.org/grpc/codes"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// testRoles are the Talos roles the role-table tests mint client certificates for.
var testRoles = []role.Role{role.Reader, role.Operator, role.EtcdBackup, role.Admin}

// roleClients returns a mutual-TLS client per role in testRoles for a configured node.
func roleClients(t *testing.T, n *Node, cl *testCluster) map[role.Role]*client.Client {
	t.Helper()

	out := make(map[role.Role]*client.Client, len(testRoles))
	for _, r := range testRoles {
		out[r] = certClient(t, n, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, r))
	}

	return out
}

// adminClient returns a fresh os:admin client for a configured node (e.g. after a reboot cut the old one).
func adminClient(t *testing.T, n *Node, cl *testCluster) *client.Client {
	t.Helper()

	return certClient(t, n, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))
}

// workerNode starts a node with the trustd stand-in, installs the worker config and waits until it runs.
func workerNode(t *testing.T, cl *testCluster, opts Options) (*Node, *client.Client) {
	t.Helper()

	opts.OSCA = cl.bundle.Certs.OS
	n := appliedNode(t, testContext(t), opts, cl.worker, PhaseRunning)

	return n, adminClient(t, n, cl)
}

// bootstrappedNode is installedNode followed by a successful Bootstrap.
func bootstrappedNode(t *testing.T, cl *testCluster, opts Options) (*Node, *client.Client) {
	t.Helper()

	n, admin := installedNode(t, cl, opts)

	if err := admin.Bootstrap(testContext(t), &machineapi.BootstrapRequest{}); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}

	return n, admin
}

// applyRequest is a default (REBOOT mode) ApplyConfiguration request for cfg.
func applyRequest(cfg []byte) *machineapi.ApplyConfigurationRequest {
	return &machineapi.ApplyConfigurationRequest{Data: cfg}
}

// readAll drains and closes a client read stream.
func readAll(r io.ReadCloser) ([]byte, error) {
	defer r.Close() //nolint:errcheck

	return io.ReadAll(r)
}

// snapshot reads a whole etcd snapshot through the client.
func snapshot(ctx context.Context, c *client.Client) ([]byte, error) {
	r, err := c.EtcdSnapshot(ctx, &machineapi.EtcdSnapshotRequest{})
	if err != nil {
		return nil, err
	}

	return readAll(r)
}

// recvErr returns openErr, or else the error of the first Recv on the opened server stream.
func recvErr[T any](stream interface{ Recv() (T, error) }, openErr error) error {
	if openErr != nil {
		return openErr
	}

	_, err := stream.Recv()

	return err
}

// wantDenied fails the test unless err is Talos's authorization failure.
func wantDenied(t *testing.T, err error) {
	t.Helper()

	wantCode(t, err, codes.PermissionDenied, "not authorized")
}

// wantNotDenied fails the test if err is an authorization failure (any other outcome means the role passed).
func wantNotDenied(t *testing.T, what string, err error) {
	t.Helper()

	if client.StatusCode(err) == codes.PermissionDenied {
		t.Fatalf("%s: role was denied: %v", what, err)
	}
}

// serviceState returns the state ServiceList reports for service id ("" if absent).
func serviceState(t *testing.T, c *client.Client, id string) string {
	t.Helper()

	resp, err := c.ServiceList(testContext(t))
	if err != nil {
		t.Fatalf("ServiceList: %v", err)
	}

	for _, svc := range resp.GetMessages()[0].GetServices() {
		if svc.GetId() == id {
			return svc.GetState()
		}
	}

	return ""
}
