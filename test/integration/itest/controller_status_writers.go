package itest

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
)

// ControllerClient is a controller-runtime client acting as ichor-controller.
func ControllerClient(t *testing.T) client.Client {
	t.Helper()
	scheme, err := ctrlcmd.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(CP.ConfigFor(ControllerUser, ControllerGroups...), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
