//go:build tools

// Package hack pins the code generators that hack/update-codegen.sh runs,
// so that go.sum records them and every run uses the same versions.
package hack

import (
	_ "k8s.io/code-generator"
	_ "k8s.io/kube-openapi/cmd/openapi-gen"
)
