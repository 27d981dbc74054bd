#!/usr/bin/env bash
# Regenerates generated.proto and generated.pb.go of pkg/apis/ichor/v1alpha1,
# the protobuf encoding ichor-apiserver stores in etcd and serves to clients
# that ask for application/vnd.kubernetes.protobuf, and the protobuf tags of
# its Go types. hack/update-codegen.sh runs it.
#
# The field numbers are the format of every object in etcd: go-to-protobuf
# keeps the numbers in the types' protobuf tags, so a field keeps its number,
# and a removed field's number must never be given to another.
set -o errexit -o nounset -o pipefail
export GOWORK=off

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"
MODULE=ichor.dev/ichor

# The generator must be the code-generator the rest of the code comes from.
want=$(go list -m -f '{{.Version}}' k8s.io/code-generator)
have=$(cd hack/tools/protobuf && go list -m -f '{{.Version}}' k8s.io/code-generator)
if [[ ${want} != "${have}" ]]; then
  echo "update-protobuf: hack/tools/protobuf pins k8s.io/code-generator ${have}, go.mod ${want}; align them" >&2
  exit 1
fi

PROTOC_DIR=$(bash hack/install-protoc.sh)
TOOLS=$(bash hack/build-protobuf-tools.sh)
export PATH="${TOOLS}:${PROTOC_DIR}:${PATH}"

# protoc resolves imports by Go import path: lay the module and the packages
# whose .proto files Ichor's import out as a GOPATH-style tree.
go mod download k8s.io/apimachinery
(cd hack/tools/protobuf && go mod download github.com/gogo/protobuf)
SRC=$(mktemp -d)
trap 'rm -rf "${SRC}"' EXIT
link() { mkdir -p "$(dirname "${SRC}/$1")" && ln -s "$2" "${SRC}/$1"; }
link "${MODULE}" "${ROOT}"
link k8s.io/apimachinery "$(go list -m -f '{{.Dir}}' k8s.io/apimachinery)"
GOGO=$(cd hack/tools/protobuf && go list -m -f '{{.Dir}}' github.com/gogo/protobuf)
link github.com/gogo/protobuf "${GOGO}"

# Packages with a leading "-" are imported, not regenerated.
go-to-protobuf \
  --go-header-file hack/boilerplate.go.txt \
  --output-dir "${SRC}" \
  --proto-import "${GOGO}/protobuf" \
  --apimachinery-packages -k8s.io/apimachinery/pkg/util/intstr,-k8s.io/apimachinery/pkg/api/resource,-k8s.io/apimachinery/pkg/runtime/schema,-k8s.io/apimachinery/pkg/runtime,-k8s.io/apimachinery/pkg/apis/meta/v1 \
  --packages "${MODULE}/pkg/apis/ichor/v1alpha1"
