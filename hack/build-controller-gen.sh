#!/usr/bin/env bash
# Builds crd-gen (hack/tools/controller-gen), controller-tools' CRD generator
# pinned at the version in that tools module, from the Go module proxy into a
# cache that later runs reuse (hack/lib/cached-build.sh). Prints the bin
# directory as the only line on stdout: BIN=$(hack/build-controller-gen.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cached-build.sh"

cached_build_begin controller-gen hack/build-controller-gen.sh hack/tools/controller-gen crd-gen
cached_build_go hack/tools/controller-gen crd-gen -ldflags="-s -w"
cached_build_publish
