#!/usr/bin/env bash
# Builds the official talosctl client from the Talos module pinned in
# hack/tools/talosctl (used by test/talossim to check the simulator against
# the real CLI) into a cache that later runs reuse:
#
#   ${ICHOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ichor}/talosctl/<key>/bin/talosctl
#
# <key> is a hash of the tools module (go.mod, go.sum, *.go), this script,
# the Go version and GOOS/GOARCH, so any change there rebuilds and an
# unchanged tree reuses the cached binary.
#
# Output contract (same as hack/build-controlplane.sh): the bin directory
# (absolute path) is the ONLY line written to stdout, so callers can do
# `BIN=$(hack/build-talosctl.sh)`. All progress and build output goes to
# stderr.
#
# A cold build takes a few minutes; the binary is built in a temporary
# directory next to the cache entry and moved into place only when done, so
# an interrupted build never leaves a partial entry.

set -euo pipefail

# Keep fd 3 for the single result line; everything else goes to stderr.
exec 3>&1 1>&2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
MODULE="hack/tools/talosctl"
BINARIES=(talosctl)

log() { echo "build-talosctl: $*" >&2; }

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
      find "${MODULE}" -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -print |
        LC_ALL=C sort |
        while IFS= read -r f; do
          printf '%s %s\n' "$(sha256 <"${f}")" "${f}"
        done
      printf '%s %s\n' "$(sha256 <hack/build-talosctl.sh)" hack/build-talosctl.sh
    )
  } | sha256 | cut -c1-16
}

complete() {
  local b
  for b in "${BINARIES[@]}"; do
    [[ -x "$1/${b}" ]] || return 1
  done
}

CACHE_ROOT="${ICHOR_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ichor}/talosctl"
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

# talosctl takes its version (tag, SHA, pkgs) from the machinery module's
# embedded gendata, so no -X stamping is needed; the build tags are the ones
# Talos' own Makefile uses for talosctl (GO_BUILDTAGS_TALOSCTL).
start=${SECONDS}
log "cache miss for key ${KEY}; building talosctl (module ${MODULE}) into ${ENTRY} (a cold build takes a few minutes)"
(cd "${ROOT}/${MODULE}" &&
  go build -mod=readonly -trimpath -tags grpcnotrace -ldflags="-s -w" -o "${TMP}/bin/talosctl" ./cmd/talosctl)
log "built talosctl in $((SECONDS - start))s"

complete "${TMP}/bin" || { log "build finished without all binaries"; exit 1; }

# Replace any stale, incomplete entry for this key, then publish atomically.
rm -rf "${ENTRY}"
mv "${TMP}" "${ENTRY}"
trap - EXIT INT TERM

# Drop the temp dirs of builds that were killed before the EXIT trap ran.
find "${CACHE_ROOT}" -maxdepth 1 -name '.build-*' -type d -mmin +120 -exec rm -rf {} + 2>/dev/null || true

log "done"
echo "${BIN}" >&3
