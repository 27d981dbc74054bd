#!/usr/bin/env bash
# Builds the official helm v4.3.2 from the Go module proxy (hack/tools/helm)
# into a cache that later runs reuse (hack/lib/cached-build.sh); the chart
# tests lint, render, install and upgrade charts/ichor with it. Prints the bin
# directory as the only line on stdout: BIN=$(hack/build-helm.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cached-build.sh"

cached_build_begin helm hack/build-helm.sh "hack/tools/helm" helm

# Stamped as Helm's own Makefile does, so `helm version` and the chart's
# .Capabilities.HelmVersion name the release.
cached_build_go hack/tools/helm helm -ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=v4.3.2 -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
cached_build_publish
