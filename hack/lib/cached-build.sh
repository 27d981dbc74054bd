# shellcheck shell=bash
# Shared by the hack/build-*.sh scripts: build Go binaries from a tools module
# into a keyed cache that later runs reuse, atomically, one build at a time.
#
#   ${ICHOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ichor}/<name>/<key>/bin/
#
# <key> hashes the tools modules' go.mod, go.sum and *.go files, the calling
# script, this file, the Go version and GOOS/GOARCH: any change rebuilds, an
# unchanged tree reuses. The calling script prints nothing on stdout but the
# bin directory, so callers can do `BIN=$(hack/build-….sh)`.
#
# Use: source this file, call cached_build_begin NAME SCRIPT "MODULE_DIRS" BINARY…
# (it exits with the cached path when the entry is complete), build each
# binary with cached_build_go, then call cached_build_publish.

set -euo pipefail

# Keep fd 3 for the single result line; everything else goes to stderr.
exec 3>&1 1>&2

# Ignore any go.work above the repo and never let a build edit go.mod/go.sum.
export GOWORK=off
export CGO_ENABLED=0

CACHED_BUILD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"

_cb_log() { echo "${CACHED_BUILD_NAME}: $*" >&2; }

_cb_sha256() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum | cut -d' ' -f1
  else
    shasum -a 256 | cut -d' ' -f1
  fi
}

# _cb_key SCRIPT MODULE_DIRS: the cache key of these sources.
_cb_key() {
  {
    go env GOVERSION GOOS GOARCH
    (
      cd "${CACHED_BUILD_ROOT}"
      # shellcheck disable=SC2086 # MODULE_DIRS is a list of directories.
      find $2 -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -print |
        LC_ALL=C sort |
        while IFS= read -r f; do
          printf '%s %s\n' "$(_cb_sha256 <"${f}")" "${f}"
        done
      for f in "$1" hack/lib/cached-build.sh; do
        printf '%s %s\n' "$(_cb_sha256 <"${f}")" "${f}"
      done
    )
  } | _cb_sha256 | cut -c1-16
}

# _cb_complete DIR: every expected binary is in DIR.
_cb_complete() {
  local b
  for b in "${CACHED_BUILD_BINARIES[@]}"; do
    [[ -x "$1/${b}" ]] || return 1
  done
}

# cached_build_begin NAME SCRIPT "MODULE_DIRS" BINARY…
cached_build_begin() {
  CACHED_BUILD_NAME="build-$1"
  local script="$2" modules="$3"
  shift 3
  CACHED_BUILD_BINARIES=("$@")
  command -v go >/dev/null 2>&1 || { _cb_log "go not found in PATH"; exit 1; }

  CACHE_ROOT="${ICHOR_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ichor}/${CACHED_BUILD_NAME#build-}"
  mkdir -p "${CACHE_ROOT}"
  CACHE_ROOT="$(cd "${CACHE_ROOT}" && pwd -P)"
  KEY="$(_cb_key "${script}" "${modules}")"
  ENTRY="${CACHE_ROOT}/${KEY}"
  BIN="${ENTRY}/bin"
  if _cb_complete "${BIN}"; then
    echo "${BIN}" >&3
    exit 0
  fi

  # Serialise concurrent cold builds (several test packages starting at once)
  # where flock(1) exists; the one that waited then finds the finished entry.
  if command -v flock >/dev/null 2>&1; then
    exec 9>"${CACHE_ROOT}/.lock"
    if ! flock -n 9; then
      _cb_log "waiting for another build to finish (lock ${CACHE_ROOT}/.lock)"
      flock 9
    fi
    if _cb_complete "${BIN}"; then
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
  _cb_log "cache miss for key ${KEY}; building into ${ENTRY} (cold builds take several minutes)"
}

# cached_build_go MODULE_DIR BINARY [go build flags…]: builds ./cmd/BINARY of
# the module; one build at a time, to spare small machines.
cached_build_go() {
  local module="$1" binary="$2"
  shift 2
  cached_build_go_package "${module}" "${binary}" "./cmd/${binary}" "$@"
}

# cached_build_go_package MODULE_DIR BINARY PACKAGE [go build flags…]: builds
# the main package PACKAGE (a tool the module requires) as BINARY.
cached_build_go_package() {
  local module="$1" binary="$2" package="$3" start=${SECONDS}
  shift 3
  _cb_log "building ${binary} (${package}, module ${module})"
  (cd "${CACHED_BUILD_ROOT}/${module}" && go build -mod=readonly -trimpath "$@" -o "${TMP}/bin/${binary}" "${package}")
  _cb_log "built ${binary} in $((SECONDS - start))s"
}

# cached_build_publish: moves the finished build into place and prints its bin directory.
cached_build_publish() {
  _cb_complete "${TMP}/bin" || { _cb_log "build finished without all binaries"; exit 1; }
  # Replace any stale, incomplete entry for this key, then publish atomically.
  rm -rf "${ENTRY}"
  mv "${TMP}" "${ENTRY}"
  trap - EXIT INT TERM
  # Drop the temp dirs of builds that were killed before the EXIT trap ran.
  find "${CACHE_ROOT}" -maxdepth 1 -name '.build-*' -type d -mmin +120 -exec rm -rf {} + 2>/dev/null || true
  _cb_log "done"
  echo "${BIN}" >&3
}
