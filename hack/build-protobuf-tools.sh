#!/usr/bin/env bash
# Builds the protobuf generators hack/update-codegen.sh runs: go-to-protobuf,
# the protoc-gen-gogo plugin it drives and goimports, pinned in the tools module
# hack/tools/protobuf, into a cache that later runs reuse
# (hack/lib/cached-build.sh). Prints the bin directory as the only line on
# stdout. protoc itself comes from hack/install-protoc.sh.
source "$(dirname "${BASH_SOURCE[0]}")/lib/cached-build.sh"

cached_build_begin protobuf-tools hack/build-protobuf-tools.sh hack/tools/protobuf go-to-protobuf protoc-gen-gogo goimports
cached_build_go_package hack/tools/protobuf go-to-protobuf k8s.io/code-generator/cmd/go-to-protobuf
cached_build_go_package hack/tools/protobuf protoc-gen-gogo k8s.io/code-generator/cmd/go-to-protobuf/protoc-gen-gogo
cached_build_go_package hack/tools/protobuf goimports golang.org/x/tools/cmd/goimports
cached_build_publish
