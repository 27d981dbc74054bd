#!/usr/bin/env bash
# Runs the test command given as arguments, keeping its whole output in
# $TMPDIR/ichor-test-logs/make-test.log (or $ICHOR_TEST_LOG.log), and when it fails repeats the lines
# that say what failed (--- FAIL, panics, test file:line messages, FAIL) at the
# very end, so that they are not buried under the logs of a long test.
set -uo pipefail

# Every control plane, simulated cluster and Ichor component watches its certificate files with
# inotify; the integration packages, side by side, need more inotify instances than the kernel's
# default of 128 per user (kind asks the same of its users).
want=1024
have=$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo "${want}")
if (( have < want )); then
  if { echo "${want}" >/proc/sys/fs/inotify/max_user_instances; } 2>/dev/null; then
    echo "run-tests: raised fs.inotify.max_user_instances from ${have} to ${want}" >&2
  else
    echo "run-tests: fs.inotify.max_user_instances is ${have}; run as root, or: sysctl -w fs.inotify.max_user_instances=${want}" >&2
  fi
fi

dir="${TMPDIR:-/tmp}/ichor-test-logs"
mkdir -p "${dir}"
log="${dir}/${ICHOR_TEST_LOG:-make-test}.log"

"$@" 2>&1 | tee "${log}"
status=${PIPESTATUS[0]}

if [[ ${status} -ne 0 ]]; then
  echo
  echo "=== what failed (whole output: ${log}) ==="
  grep -E -e '^\s*--- FAIL' -e '^panic:' -e '^\s+[A-Za-z0-9_]+_test\.go:[0-9]+: ' -e '^FAIL' -e 'test timed out' "${log}" |
    cut -c1-400 | tail -n 60
fi
exit "${status}"
