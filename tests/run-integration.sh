#!/usr/bin/env bash
# Runs every integration test (tests/integration/NN-name.sh, in the order of their numbers) against the built binaries.
# Each test is a script that exits 0 on pass, 77 on skip (with a reason on stderr), anything else on fail.
# Output: one line per test as it ends, then every skip again with its reason (so none goes unseen at the end
# of `make check`), then "integration: N passed, M failed, K skipped". Exit 1 if any failed.
# TRUN_TESTS="pattern..." runs only tests whose file name contains one of the patterns.
# TRUN_TEST_JOBS=N (default 2) runs up to N tests at once. A test says in a header line what it shares:
#   # runner: alone        it runs with no other test (the machine's CPUs, fixed names such as the
#                          sandbox's "br" namespace, /etc/hosts compared before and after)
#   # runner: lock=NAME    it runs with no other test holding NAME (dist: `make release`/`wheel`/`deb`/`image`
#                          write dist/ and the build's packaging directories; 29400: torchrun 1.13's
#                          --standalone listens on localhost:29400, a fixed port)
# A test that waits to run alone holds back the tests after it, so it is not put off forever.
set -u
here=$(cd "$(dirname "$0")" && pwd)
export TRUN_REPO=$(cd "$here/.." && pwd)
export TRUN_BUILD=${TRUN_BUILD:-$TRUN_REPO/build}
export TRUN_CHROOT=${TRUN_CHROOT:-/var/cache/trun/trixie}
export TRUN_HOST_PY=${TRUN_HOST_PY:-/usr/bin/python3}
# wait -n -p (which test ended) is bash 5.1 (Debian bullseye and later).
[ "${BASH_VERSINFO[0]}${BASH_VERSINFO[1]}" -ge 51 ] || { echo "run-integration: needs bash 5.1 or later, not $BASH_VERSION" >&2; exit 2; }
jobs=${TRUN_TEST_JOBS:-2}
case "$jobs" in '' | *[!0-9]* | 0) echo "run-integration: TRUN_TEST_JOBS must be a number >= 1, not '$jobs'" >&2; exit 2 ;; esac
logdir=$TRUN_BUILD/test-logs
mkdir -p "$logdir"
pass=0 fail=0 skip=0
skipped=()

# The queue, in the order of their numbers (100 after 99), whatever the locale sorts.
queue=()
read -ra patterns <<<"${TRUN_TESTS:-}"
[ ${#patterns[@]} -gt 0 ] || patterns=("")
# Each test's header line "# runner: ..." (the first 30 lines), read once: "alone", "lock=NAME" or ""
# (shares all).
declare -A tag_of=()
for t in $(cd "$here/integration" && printf '%s\n' [0-9]*.sh | sort -n); do
  for p in "${patterns[@]}"; do
    case "$t" in *"$p"*)
      queue+=("$here/integration/$t")
      tag_of[$here/integration/$t]=$(sed -n '1,30{s/^# runner: *//p}' "$here/integration/$t" | head -n 1)
      break ;;
    esac
  done
done

declare -A run_name=() run_start=() run_tag=()
alone_running=0
declare -A lock_held=()

start_test() { # path tag
  local t=$1 name
  name=$(basename "$t" .sh)
  timeout --kill-after=10 "${TRUN_TEST_TIMEOUT:-600}" bash "$t" >"$logdir/$name.log" 2>&1 &
  run_name[$!]=$name
  run_start[$!]=$(date +%s)
  run_tag[$!]=$2
  case "$2" in alone) alone_running=1 ;; lock=*) lock_held[${2#lock=}]=1 ;; esac
}

finish_test() { # pid rc
  local p=$1 rc=$2 name=${run_name[$1]} secs
  secs=$(($(date +%s) - ${run_start[$p]}))
  case "${run_tag[$p]}" in alone) alone_running=0 ;; lock=*) unset "lock_held[${run_tag[$p]#lock=}]" ;; esac
  unset "run_name[$p]" "run_start[$p]" "run_tag[$p]"
  if [ "$rc" -eq 0 ]; then
    pass=$((pass + 1)); echo "PASS $name (${secs}s)"
  elif [ "$rc" -eq 77 ]; then
    skip=$((skip + 1)); skipped+=("$name: $(tail -n 1 "$logdir/$name.log")"); echo "SKIP ${skipped[-1]}"
  else
    fail=$((fail + 1)); echo "FAIL $name (exit $rc, ${secs}s); last lines of $logdir/$name.log:"
    tail -n 30 "$logdir/$name.log" | sed 's/^/    /'
  fi
}

# Starts what may start now: the queue in order; a test that must run alone waits for the others to end
# and holds back the rest; a test whose lock is held is passed over for later ones.
start_ready() {
  local i t tag n
  n=${#run_name[@]}
  for i in "${!queue[@]}"; do
    [ "$alone_running" = 1 ] && return
    t=${queue[$i]}
    tag=${tag_of[$t]}
    if [ "$tag" = alone ]; then
      [ "$n" -eq 0 ] && { start_test "$t" alone; unset "queue[$i]"; }
      return
    fi
    [ "$n" -ge "$jobs" ] && return
    case "$tag" in lock=*) [ -n "${lock_held[${tag#lock=}]:-}" ] && continue ;; esac
    start_test "$t" "$tag"
    unset "queue[$i]"
    n=$((n + 1))
  done
}

while :; do
  start_ready
  [ ${#run_name[@]} -eq 0 ] && break
  wait -n -p done_pid "${!run_name[@]}"
  rc=$?
  finish_test "$done_pid" "$rc"
done
for s in "${skipped[@]}"; do echo "integration: skipped $s"; done
echo "integration: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
