#!/usr/bin/env bash
# Builds the control-plane binaries that integration tests and `make run`
# need (kube-apiserver, kube-controller-manager, kubectl, etcd) from the Go
# module proxy, via the tools modules under hack/tools/, into a cache that
# later runs reuse:
#
#   ${ICHOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ichor}/controlplane/<key>/bin/
#
# <key> is a hash of the tools modules (go.mod, go.sum, *.go), this script,
# the Go version and GOOS/GOARCH, so any change there rebuilds and an
# unchanged tree reuses the cached binaries.
#
# Output contract: the bin directory (absolute path) is the ONLY line written
# to stdout, so callers can do `BIN=$(hack/build-controlplane.sh)`. All
# progress and build output goes to stderr.
#
# A cold build takes several minutes; the binaries are built in a temporary
# directory next to the cache entry and moved into place only when all of
# them are done, so an interrupted build never leaves a partial entry.

set -euo pipefail

# Keep fd 3 for the single result line; everything else goes to stderr.
exec 3>&1 1>&2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
TOOLS="${ROOT}/hack/tools"
BINARIES=(kube-apiserver kube-controller-manager kubectl etcd)

log() { echo "build-controlplane: $*" >&2; }

command -v go >/dev/null 2>&1 || { log "go not found in PATH"; exit 1; }

# Ignore any go.work above the repo and never let the build edit go.mod/go.sum.
export GOWORK=off
export CGO_ENABLED=0

sha256() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum | cut -d' ' -f1
  else
    shasum -a 256 | cut -d' ' -f1
  fi
}

cache_key() {
  {
    go env GOVERSION GOOS GOARCH
    (
      cd "${ROOT}"
      # Only the modules built here: hack/tools/talosctl has its own script
      # and key (hack/build-talosctl.sh) and must not invalidate this cache.
      find hack/tools/controlplane hack/tools/etcd -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -print |
        LC_ALL=C sort |
        while IFS= read -r f; do
          printf '%s %s\n' "$(sha256 <"${f}")" "${f}"
        done
      printf '%s %s\n' "$(sha256 <hack/build-controlplane.sh)" hack/build-controlplane.sh
    )
  } | sha256 | cut -c1-16
}

complete() {
  local b
  for b in "${BINARIES[@]}"; do
    [[ -x "$1/${b}" ]] || return 1
  done
}

CACHE_ROOT="${ICHOR_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ichor}/controlplane"
mkdir -p "${CACHE_ROOT}"
CACHE_ROOT="$(cd "${CACHE_ROOT}" && pwd -P)"
KEY="$(cache_key)"
ENTRY="${CACHE_ROOT}/${KEY}"
BIN="${ENTRY}/bin"

if complete "${BIN}"; then
  echo "${BIN}" >&3
  exit 0
fi

# Serialise concurrent cold builds (e.g. several test packages starting at
# once) where flock(1) exists; the loser then finds the finished entry.
if command -v flock >/dev/null 2>&1; then
  exec 9>"${CACHE_ROOT}/.lock"
  if ! flock -n 9; then
    log "waiting for another build to finish (lock ${CACHE_ROOT}/.lock)"
    flock 9
  fi
  if complete "${BIN}"; then
    echo "${BIN}" >&3
    exit 0
  fi
fi

TMP="$(mktemp -d "${CACHE_ROOT}/.build-${KEY}.XXXXXX")"
trap 'rm -rf "${TMP}"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
chmod 0755 "${TMP}"
mkdir -p "${TMP}/bin"

# Version stamping, as kube's hack/lib/version.sh does, so --version,
# `kubectl version` and discovery report the real release instead of v0.0.0.
# The module proxy has no commit hash, so gitCommit is left empty and
# buildDate is the release's module timestamp (keeps builds reproducible).
read -r KUBE_VERSION KUBE_DATE < <(cd "${TOOLS}/controlplane" &&
  go list -m -f '{{.Version}} {{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)
[[ "${KUBE_VERSION}" == v* ]] || { log "cannot read the k8s.io/kubernetes version"; exit 1; }
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

# build <module dir> <binary> <ldflags>; one at a time to spare small machines.
build() {
  local start=${SECONDS}
  log "building $2 (module hack/tools/$1)"
  (cd "${TOOLS}/$1" && go build -mod=readonly -trimpath -ldflags="$3" -o "${TMP}/bin/$2" "./cmd/$2")
  log "built $2 in $((SECONDS - start))s"
}

log "cache miss for key ${KEY}; building into ${ENTRY} (cold builds take several minutes)"
build controlplane kube-apiserver "${KUBE_LDFLAGS}"
build controlplane kube-controller-manager "${KUBE_LDFLAGS}"
build controlplane kubectl "${KUBE_LDFLAGS}"
build etcd etcd "-s -w"

complete "${TMP}/bin" || { log "build finished without all binaries"; exit 1; }

# Replace any stale, incomplete entry for this key, then publish atomically.
rm -rf "${ENTRY}"
mv "${TMP}" "${ENTRY}"
trap - EXIT INT TERM

# Drop the temp dirs of builds that were killed before the EXIT trap ran.
find "${CACHE_ROOT}" -maxdepth 1 -name '.build-*' -type d -mmin +120 -exec rm -rf {} + 2>/dev/null || true

log "done"
echo "${BIN}" >&3
