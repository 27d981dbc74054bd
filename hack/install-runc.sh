#!/usr/bin/env bash
# Installs Debian's runc, which the image test (hack/images) runs each built
# image with, unless it is already installed. apt keeps the package in its
# own cache, so a later run installs nothing. Prints runc's path as the only
# line on stdout: RUNC=$(hack/install-runc.sh).
set -euo pipefail

bin=/usr/sbin/runc

if ! "${bin}" --version >/dev/null 2>&1; then
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    sudo=(sudo --non-interactive)
  fi
  echo "installing Debian's runc (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq >&2
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends runc >&2
fi

"${bin}" --version >&2
echo "${bin}"
