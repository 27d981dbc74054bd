#!/usr/bin/env bash
# Fails when git tracks a file of 5 MB or more, or an executable that is not
# a script: build outputs belong in bin/ (ignored), never in the repository.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
limit=$((5 * 1024 * 1024))
bad=0
while IFS= read -r -d '' f; do
  [[ -f "$f" ]] || continue
  size=$(stat -c %s "$f")
  if (( size >= limit )); then
    echo "tracked file over 5 MB: $f ($size bytes)" >&2; bad=1
  fi
  if [[ -x "$f" ]] && ! head -c 2 "$f" | grep -q '^#!'; then
    echo "tracked executable that is not a script: $f" >&2; bad=1
  fi
done < <(git ls-files -z)
exit "$bad"
