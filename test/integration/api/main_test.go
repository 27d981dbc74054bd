// Package api tests Ichor's API through a real kube-apiserver and its aggregator, as kubectl and client-go users reach it: every kind, verb, subresource, admission check and RBAC refusal.
package api

import (
	"testing"

	"ichor.dev/ichor/test/integration/itest"
)

// TestMain runs the package's tests on a control plane of their own.
func TestMain(m *testing.M) { itest.Main(m, itest.Single) }
