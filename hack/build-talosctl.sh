#!/usr/bin/env bash
# Builds the official talosctl of each Talos version Ichor manages, which the
# simulator's fidelity tests run against simulated nodes of that version,
# from the Go module proxy into a cache that later runs reuse
# (hack/lib/cached-build.sh): talosctl is v1.13.0 (hack/tools/talosctl),
# talosctl-v1.14.1 is v1.14.1 (hack/tools/talosctl-v1.14). Prints the bin
# directory as the only line on stdout: BIN=$(hack/build-talosctl.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cached-build.sh"

cached_build_begin talosctl hack/build-talosctl.sh "hack/tools/talosctl hack/tools/talosctl-v1.14" talosctl talosctl-v1.14.1

# talosctl takes its version from machinery's embedded gendata, so no -X
# stamping; the build tag is the one Talos' own Makefile uses for talosctl.
cached_build_go hack/tools/talosctl talosctl -tags=grpcnotrace -ldflags="-s -w"
cached_build_go hack/tools/talosctl-v1.14 talosctl-v1.14.1 -tags=grpcnotrace -ldflags="-s -w"
cached_build_publish
