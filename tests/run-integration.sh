#!/usr/bin/env bash
# Runs every integration test (tests/integration/NN-name.sh, in the order of their numbers) against the built binaries.
# Each test is a script that exits 0 on pass, 77 on skip (with a reason on stderr), anything else on fail.
# Output: one line per test, then every skip again with its reason (so none goes unseen at the end of
# `make check`), then "integration: N passed, M failed, K skipped". Exit 1 if any failed.
# TRUN_TESTS=pattern runs only tests whose file name contains pattern.
set -u
here=$(cd "$(dirname "$0")" && pwd)
export TRUN_REPO=$(cd "$here/.." && pwd)
export TRUN_BUILD=${TRUN_BUILD:-$TRUN_REPO/build}
export TRUN_CHROOT=${TRUN_CHROOT:-/var/cache/trun/trixie}
export TRUN_HOST_PY=${TRUN_HOST_PY:-/usr/bin/python3}
logdir=$TRUN_BUILD/test-logs
mkdir -p "$logdir"
pass=0 fail=0 skip=0
skipped=()
# In the order of their numbers (100 after 99), whatever the locale sorts.
for t in $(cd "$here/integration" && printf '%s\n' [0-9]*.sh | sort -n | sed "s|^|$here/integration/|"); do
  name=$(basename "$t" .sh)
  case "$name" in *"${TRUN_TESTS:-}"*) ;; *) continue ;; esac
  start=$(date +%s)
  timeout --kill-after=10 ${TRUN_TEST_TIMEOUT:-600} bash "$t" >"$logdir/$name.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1)); echo "PASS $name (${secs}s)"
  elif [ $rc -eq 77 ]; then
    skip=$((skip + 1)); skipped+=("$name: $(tail -n 1 "$logdir/$name.log")"); echo "SKIP ${skipped[-1]}"
  else
    fail=$((fail + 1)); echo "FAIL $name (exit $rc, ${secs}s); last lines of $logdir/$name.log:"
    tail -n 30 "$logdir/$name.log" | sed 's/^/    /'
  fi
done
for s in "${skipped[@]}"; do echo "integration: skipped $s"; done
echo "integration: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
