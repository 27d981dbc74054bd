package itest

import (
	"testing"

	"k8s.io/client-go/rest"
)

func OperatorClient(t *testing.T) *rest.Config { return CP.ConfigFor("olivia", "ichor:operator") }
