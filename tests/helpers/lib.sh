# Shared helpers for the agent integration tests (tests/integration/4x-agent-*.sh); sourced, not run.
# Sets: repo, build, trun, host_py, chroot_dir, tmp (a private dir under /tmp, removed on exit).
# Everything started through start_bg / trun_run runs in its own process group and is killed on exit.
repo=${TRUN_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
build=${TRUN_BUILD:-$repo/build}
trun=$build/trun
host_py=${TRUN_HOST_PY:-/usr/bin/python3}
chroot_dir=${TRUN_CHROOT:-/var/cache/trun/trixie}
# /tmp (not $TMPDIR): the chroot bind-mounts the host's /tmp, so chroot workers see the same paths.
tmp=$(mktemp -d /tmp/trun-agent-test.XXXXXX)
_bg_pgids=()
# trun and torchrun put their default log dirs (torchelastic_XXXX) under $TMPDIR: keep them in $tmp.
export TMPDIR=$tmp/tmpdir
mkdir -p "$TMPDIR"

_agent_cleanup() {
  local g
  for g in "${_bg_pgids[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
  for g in "${_bg_pgids[@]}"; do kill -KILL -- "-$g" 2>/dev/null || true; done
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap _agent_cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
skip() {
  echo "$*" >&2
  exit 77
}

need_trun() { [ -x "$trun" ] || fail "$trun is missing; run 'make' first"; }
# stop_pid PID: SIGTERM, then (after 10 s) SIGKILL; reaped when it is this shell's child.
stop_pid() {
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
# wait_file FILE WHAT PID: waits (300 s bound) for FILE to be non-empty while process PID runs.
wait_file() {
  for _ in $(seq 1500); do
    [ -s "$1" ] && return 0
    kill -0 "$3" 2>/dev/null || fail "trun ended while waiting for $2"
    sleep 0.2
  done
  fail "no $2 within 300 s"
}
# show FILE...: each existing file, every line prefixed with its name (a test's log shows what it saw).
show() {
  local f
  for f in "$@"; do [ -f "$f" ] && awk -v p="    $(basename "$f")| " '{print p $0}' "$f"; done
  return 0
}
. "$repo/tests/helpers/need.sh"
need_host_torch() { need_torch_py "$host_py"; }
need_chroot() {
  [ -f "$chroot_dir/.trun-ready" ] ||
    fail "no torch 2.6 chroot at $chroot_dir: the deps step builds it (run 'make deps': scripts/chroot.sh)"
}

# Runs a command in its own process group (setsid), in the foreground, with a generous safety limit
# (TRUN_CASE_TIMEOUT, default 240 s); returns its exit status. The group is killed afterwards, and on exit.
run_pg() {
  setsid timeout --kill-after=10 "${TRUN_CASE_TIMEOUT:-240}" "$@" &
  local pid=$!
  _bg_pgids+=("$pid")
  local rc=0
  wait "$pid" || rc=$?
  kill -KILL -- "-$pid" 2>/dev/null || true
  return $rc
}

# trun with the host's torch python for the workers (trun, like torchrun, uses $PYTHON_EXEC).
trun_run() { PYTHON_EXEC=$host_py run_pg "$trun" "$@"; }

# root_cause NAME: the "Root Cause" block of the failure report in $tmp/NAME.err.
root_cause() { sed -n '/^Root Cause (first observed failure):/,/^=====/p' "$tmp/$1.err"; }

# expect_root NAME REGEX...: each extended regex must match a line of the root-cause block of NAME.
expect_root() {
  local name=$1 block
  shift
  block=$(root_cause "$name")
  [ -n "$block" ] || fail "$name: no 'Root Cause (first observed failure):' block on stderr"
  for re in "$@"; do
    grep -Eq -- "$re" <<<"$block" || fail "$name: the root-cause block has no line matching /$re/:
$block"
  done
}

# run_case NAME WANT_RC CMD...: runs CMD with its output in $tmp/NAME.{out,err}, shows both, and fails unless
# it exited WANT_RC.
run_case() {
  local name=$1 want=$2 rc=0
  shift 2
  echo "== $name"
  "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  sed 's/^/    out| /' "$tmp/$name.out"
  sed 's/^/    err| /' "$tmp/$name.err"
  [ $rc -eq "$want" ] || fail "$name: exited $rc, want $want"
}
