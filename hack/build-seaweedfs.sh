#!/usr/bin/env bash
# Builds SeaweedFS's weed command (hack/tools/seaweedfs), the real
# S3-compatible server the backup tests write to, from the Go module proxy
# into a cache that later runs reuse (hack/lib/cached-build.sh). Prints the
# bin directory as the only line on stdout: BIN=$(hack/build-seaweedfs.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cached-build.sh"

cached_build_begin seaweedfs hack/build-seaweedfs.sh hack/tools/seaweedfs weed

cached_build_go_package hack/tools/seaweedfs weed github.com/seaweedfs/seaweedfs/weed -ldflags="-s -w"
cached_build_publish
