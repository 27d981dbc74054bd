#!/usr/bin/env bash
# Fails when the generated code in the tree differs from what
# hack/update-codegen.sh produces: regenerates in a copy and compares.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "${TMP}"' EXIT

# The copy holds the sources, not build output, caches or git metadata.
tar -C "${ROOT}" --exclude=./.git --exclude=./bin --exclude=./.local -cf - . | tar -C "${TMP}" -xf -
(cd "${TMP}" && bash hack/update-codegen.sh >/dev/null)

status=0
for path in pkg hack/api-rule-violations.list test/bench/crds; do
  if ! diff -ruN "${ROOT}/${path}" "${TMP}/${path}"; then
    status=1
  fi
done
if [[ ${status} -ne 0 ]]; then
  echo "Generated code is out of date; run: make codegen" >&2
  exit 1
fi
echo "Generated code is up to date."
