package intake

import (
	"context"
	"errors"
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
)

// factsNode is a session whose only call is Facts.
type factsNode struct {
	talos.Node
	uuid string
}

func (n factsNode) Facts(context.Context) (*talos.Facts, error) {
	return &talos.Facts{UUID: n.uuid}, nil
}

func TestCheckIdentity(t *testing.T) {
	m := &v1alpha1.TalosMachine{Spec: v1alpha1.TalosMachineSpec{Address: "10.5.0.10:50000"},
		Status: v1alpha1.TalosMachineStatus{Hardware: &v1alpha1.HardwareStatus{UUID: "uuid-a"}}}
	if err := CheckIdentity(context.Background(), factsNode{uuid: "uuid-a"}, m); err != nil {
		t.Errorf("the machine itself: %v", err)
	}
	err := CheckIdentity(context.Background(), factsNode{uuid: "uuid-b"}, m)
	var other *NotThisMachineError
	if !errors.As(err, &other) || other.Got != "uuid-b" || other.Want != "uuid-a" {
		t.Errorf("another machine at the address: %v", err)
	}
	m.Status.Hardware.UUID = ""
	if err := CheckIdentity(context.Background(), factsNode{uuid: "uuid-b"}, m); err != nil {
		t.Errorf("a machine that reported no UUID: %v", err)
	}
}
