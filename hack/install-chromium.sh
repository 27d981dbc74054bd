#!/usr/bin/env bash
# Installs Debian's Chromium, the real browser the console's tests drive
# (test/integration/access/browser_test.go, through chromedp), unless it is already
# installed. apt keeps the package in its own cache, so a later run installs
# nothing. Prints the browser's path as the only line on stdout:
# CHROMIUM=$(hack/install-chromium.sh).
set -euo pipefail

bin=/usr/bin/chromium

if ! "${bin}" --version >/dev/null 2>&1; then
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    sudo=(sudo --non-interactive)
  fi
  echo "installing Debian's chromium (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq >&2
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
fi

"${bin}" --version >&2
echo "${bin}"
