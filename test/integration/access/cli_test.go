package access

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/test/integration/itest"
)

func TestCLIActions(t *testing.T) {
	ns := itest.CP.Namespace(t)
	ctx, cancel := context.WithTimeout(itest.APIContext(t), 3*time.Minute)
	defer cancel()
	n := "--namespace=" + ns
	itest.PinnedMachine(t, ns, "w1")
	itest.PinnedMachineOf(t, ns, "c1", v1alpha1.MachineRoleControlPlane)

	// Machines: an operator approves a worker; a rejection needs a reason;
	// a control plane needs an admin, and the refusal says who may.
	itest.RunIchor(ctx, t, nil, "olivia", "ichor:operator", n, "approve", "w1", "--reason", "racked in row 4").
		Ok(t, "operator approves w1", "talosmachine.ichor.dev/w1 approved")
	m, err := itest.APIClient(t).IchorV1alpha1().TalosMachines(ns).Get(ctx, "w1", metav1.GetOptions{})
	if err != nil || m.Status.Approval == nil || m.Status.Approval.By != "olivia" || m.Status.Approval.Reason != "racked in row 4" {
		t.Fatalf("w1's approval: %+v, %v", m.Status.Approval, err)
	}
	itest.RunIchor(ctx, t, nil, "olivia", "ichor:operator", n, "reject", "c1").Fails(t, "a rejection without a reason", "a rejection needs a reason")
	itest.RunIchor(ctx, t, nil, "olivia", "ichor:operator", n, "approve", "c1").Fails(t, "operator approves a control plane",
		`The ichor:admin group (ClusterRole ichor-admin) holds "approve" on talosmachines/privileged-approval`)
	itest.RunIchor(ctx, t, nil, "alice", "ichor:viewer", n, "approve", "w1").Fails(t, "viewer approves",
		`The ichor:operator group (ClusterRole ichor-operator) holds "patch" on talosmachines/approval`)

	// Operations: start as kubectl's plugin, -o json; a destructive type
	// needs an admin; starting twice is a conflict that says why.
	ops := itest.APIClient(t).IchorV1alpha1().TalosOperations(ns)
	for name, typ := range map[string]v1alpha1.OperationType{"reboot-all": v1alpha1.OperationReboot, "rotate-ca": v1alpha1.OperationCARotation} {
		if _, err := ops.Create(ctx, &v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.TalosOperationSpec{ClusterName: "prod", Type: typ}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := itest.RunIchor(ctx, t, nil, "olivia", "ichor:operator", "kubectl", n, "start", "reboot-all", "-o", "json")
	r.Ok(t, "kubectl ichor start -o json")
	var started v1alpha1.TalosOperation
	if err := json.Unmarshal([]byte(r.Stdout), &started); err != nil || started.Status.StartedBy != "olivia" || started.Kind != "TalosOperation" {
		t.Errorf("start -o json: %+v, %v\n%s", started.Status, err, r.Stdout)
	}
	itest.RunIchor(ctx, t, nil, "carol", "ichor:admin", n, "start", "reboot-all").Fails(t, "a second start", "already started by olivia", "An operation runs once: to run it again, create a new TalosOperation")
	itest.RunIchor(ctx, t, nil, "olivia", "ichor:operator", n, "start", "rotate-ca").Fails(t, "operator starts a CA rotation",
		`The ichor:admin group (ClusterRole ichor-admin) holds "start" on talosoperations/ca-rotation`)
	itest.RunIchor(ctx, t, nil, "carol", "ichor:admin", n, "start", "rotate-ca").Ok(t, "admin starts a CA rotation", "talosoperation.ichor.dev/rotate-ca started")
	// Nothing runs these here: a wait gives up, saying so.
	itest.RunIchor(ctx, t, nil, "olivia", "ichor:operator", n, "wait", "talosoperation/reboot-all", "--timeout", "2s").
		Fails(t, "a wait that times out", "gave up waiting for reboot-all after 2s")

	// Override: admins only, with a check and a reason.
	itest.RunIchor(ctx, t, nil, "olivia", "ichor:operator", n, "override", "taloscluster/prod", "--check", "ClusterHealth", "--reason", "m4 is gone").
		Fails(t, "operator overrides", `The ichor:admin group (ClusterRole ichor-admin) holds "create" on talosclusters/override`)
	itest.RunIchor(ctx, t, nil, "carol", "ichor:admin", n, "override", "tc/prod", "--check", "ClusterHealth", "--reason", "m4 is gone").
		Ok(t, "admin overrides", "taloscluster.ichor.dev/prod overridden")
	itest.RunIchor(ctx, t, nil, "carol", "ichor:admin", n, "override", "prod", "--check", "ClusterHealth", "--reason", "x").
		Fails(t, "an override without a kind", "name the object as KIND/NAME")

	// Downloads: an operator may not take an etcd snapshot; an unknown
	// download is named.
	itest.RunIchor(ctx, t, nil, "olivia", "ichor:operator", n, "download", "etcd-snapshot", "c1", "-O", filepath.Join(t.TempDir(), "etcd")).
		Fails(t, "operator downloads an etcd snapshot", `The ichor:admin group (ClusterRole ichor-admin) holds "get" on talosmachines/etcd-snapshot`)
	itest.RunIchor(ctx, t, nil, "carol", "ichor:admin", n, "download", "kubeconfig", "prod").Fails(t, "an unknown download", `"kubeconfig" is not a download`)

	// The plugin shows itself as kubectl ichor.
	help := itest.RunIchor(ctx, t, nil, "", "", "kubectl", "--help")
	help.Ok(t, "kubectl ichor --help", "kubectl ichor [command]", "approve", "download")
}

// TestCLIPassword: an admin sets a user's password from the environment
// (no terminal); a password the server refuses says why; a viewer may not.
func TestCLIPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(itest.APIContext(t), 2*time.Minute)
	defer cancel()
	users := itest.APIClient(t).IchorV1alpha1().IchorUsers()
	name := "cli-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if _, err := users.Create(ctx, &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleViewer}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = users.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	itest.RunIchor(ctx, t, []string{"ICHOR_PASSWORD=correct horse battery"}, "carol", "ichor:admin", "password", name).
		Ok(t, "admin sets a password", "ichoruser.ichor.dev/"+name+" password set")
	itest.RunIchor(ctx, t, []string{"ICHOR_PASSWORD=short"}, "carol", "ichor:admin", "password", name).Fails(t, "a short password", "at least 12")
	itest.RunIchor(ctx, t, nil, "carol", "ichor:admin", "password", name).Fails(t, "no password given", "no terminal to prompt on")
	itest.RunIchor(ctx, t, []string{"ICHOR_PASSWORD=correct horse battery"}, "alice", "ichor:viewer", "password", name).Fails(t, "viewer sets a password", "forbidden")
}
