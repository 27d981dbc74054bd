#!/usr/bin/env bash
# Builds the control-plane binaries that integration tests and `make run`
# need — kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from
# k8s.io/kubernetes (hack/tools/controlplane), etcd from
# go.etcd.io/etcd/server/v3 (hack/tools/etcd) — from the Go module proxy into
# a cache that later runs reuse (hack/lib/cached-build.sh). Prints the bin
# directory as the only line on stdout: BIN=$(hack/build-controlplane.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib/cached-build.sh"

cached_build_begin controlplane hack/build-controlplane.sh "hack/tools/controlplane hack/tools/etcd" \
  kube-apiserver kube-controller-manager kube-scheduler kubectl etcd

# Version stamping, as kube's hack/lib/version.sh does, so --version,
# `kubectl version` and discovery report the real release instead of v0.0.0.
# The module proxy has no commit hash, so gitCommit is left empty and
# buildDate is the release's module timestamp (keeps builds reproducible).
read -r KUBE_VERSION KUBE_DATE < <(cd "${CACHED_BUILD_ROOT}/hack/tools/controlplane" &&
  go list -m -f '{{.Version}} {{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)
[[ "${KUBE_VERSION}" == v* ]] || { echo "build-controlplane: cannot read the k8s.io/kubernetes version" >&2; exit 1; }
KUBE_MAJOR="${KUBE_VERSION#v}"; KUBE_MAJOR="${KUBE_MAJOR%%.*}"
KUBE_MINOR="${KUBE_VERSION#v*.}"; KUBE_MINOR="${KUBE_MINOR%%.*}"
KUBE_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  KUBE_LDFLAGS+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
  KUBE_LDFLAGS+=" -X ${pkg}.gitMajor=${KUBE_MAJOR}"
  KUBE_LDFLAGS+=" -X ${pkg}.gitMinor=${KUBE_MINOR}"
  KUBE_LDFLAGS+=" -X ${pkg}.gitTreeState=clean"
  KUBE_LDFLAGS+=" -X ${pkg}.gitCommit="
  KUBE_LDFLAGS+=" -X ${pkg}.buildDate=${KUBE_DATE:-1970-01-01T00:00:00Z}"
done

cached_build_go hack/tools/controlplane kube-apiserver -ldflags="${KUBE_LDFLAGS}"
cached_build_go hack/tools/controlplane kube-controller-manager -ldflags="${KUBE_LDFLAGS}"
cached_build_go hack/tools/controlplane kube-scheduler -ldflags="${KUBE_LDFLAGS}"
cached_build_go hack/tools/controlplane kubectl -ldflags="${KUBE_LDFLAGS}"
cached_build_go hack/tools/etcd etcd -ldflags="-s -w"
cached_build_publish
