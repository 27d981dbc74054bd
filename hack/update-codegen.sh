#!/usr/bin/env bash
# Regenerates everything under pkg/generated and every zz_generated.*.go file
# from the API types, with the generator versions pinned in go.mod, the
# protobuf encoding of the v1alpha1 types (hack/update-protobuf.sh) and the
# benchmark's CRDs under test/bench/crds.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"
MODULE=ichor.dev/ichor
BOILERPLATE="${ROOT}/hack/boilerplate.go.txt"

# go list names the module's directory only once it is in the module cache.
go mod download k8s.io/code-generator
CODEGEN_PKG=$(go list -m -f '{{.Dir}}' k8s.io/code-generator)
# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"

# First, as it rewrites the types' protobuf tags.
bash "${ROOT}/hack/update-protobuf.sh"

kube::codegen::gen_helpers --boilerplate "${BOILERPLATE}" "${ROOT}/pkg/apis"

kube::codegen::gen_openapi \
    --output-dir "${ROOT}/pkg/generated/openapi" \
    --output-pkg "${MODULE}/pkg/generated/openapi" \
    --output-model-name-file zz_generated.model_name.go \
    --report-filename "${ROOT}/hack/api-rule-violations.list" \
    --update-report \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/pkg/apis"

kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --applyconfig-openapi-schema <(go run "${MODULE}/pkg/generated/openapi/cmd/models-schema") \
    --output-dir "${ROOT}/pkg/generated" \
    --output-pkg "${MODULE}/pkg/generated" \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/pkg/apis"

bash "${ROOT}/hack/update-bench-crds.sh"
