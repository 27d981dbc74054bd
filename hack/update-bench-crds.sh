#!/usr/bin/env bash
# Regenerates test/bench/crds: the ichor.dev/v1alpha1 Go types as
# CustomResourceDefinitions in the group bench.ichor.dev, the CRD anchor that
# `make bench` measures ichor-apiserver against. hack/update-codegen.sh runs it,
# so `make verify` fails when the CRDs are stale.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"
BIN=$(bash hack/build-controller-gen.sh)

OUT=test/bench/crds
rm -rf "${OUT}"
GOWORK=off "${BIN}/crd-gen" -group bench.ichor.dev -out "${OUT}" ./pkg/apis/ichor/v1alpha1
