#!/usr/bin/env bash
# runner: alone
# Differential test of trun-store against torch's own TCPStore server, with torch's real Python client.
#
#  1. torch 1.13 (host /usr/bin/python3): tests/store/ops.py runs every op of 1.13's Python TCPStore API
#     against (a) torch 1.13's own server and (b) a fresh trun-store; the normalised outputs must be equal.
#  2. The same with torch 2.6 (Debian trixie chroot, classic server, use_libuv=False): adds check, append,
#     multi_get, multi_set, wait/get time-outs after which the connection is still used.
#  3. Behaviour checks on both servers and both versions: waiters woken by another client (SET, ADD, and for
#     2.6 APPEND, MULTI_SET; multi-key waits; deleted keys), 40 clients x 50 concurrent adds -> 2000 with every
#     reply 1..2000 seen exactly once, wait time-out exception types (1.13 RuntimeError, 2.6 DistStoreError)
#     and, on 2.6, the connection still working after a time-out.
#  4. torch 1.13 and torch 2.6 clients on the SAME trun-store port at the same time: each reads the other's
#     keys (a 2.6 WAIT woken by a 1.13 SET and vice versa), shared counter, compare_set race, binary values.
#  5. trun-store --threads 4 (connections dealt over four loops): ops.py ops of each version diffed against
#     torch's server's output of step 1/2, and the wake-up and 40 x 50 adds checks of step 3.
# Steps 1 and 2 (each with step 3's checks of its version) run at the same time, each with its own servers;
# so do step 5's two versions. Their output is shown part after part.
#
# Intentional differences between trun-store and torch's classic server (tested explicitly, not diffed):
#  - GET / MULTI_GET of a missing key: classic server closes the connection (2.6 MULTI_GET first streams the
#    values of the keys before the missing one, then closes); trun-store replies an empty value and keeps the
#    connection, like torch's libuv server. Unreachable from torch's Python client (it WAITs before every
#    GET), so tests/store/raw_ops.py checks it with raw sockets: 'classic' expectations against torch's
#    servers, 'trun' expectations against trun-store.
#  - COMPARE_SET wakes waiters of the key when it stores a value (like torch's libuv server); the classic
#    server never does. `ops.py caswake nowake` asserts the classic behaviour on torch's servers,
#    `ops.py caswake wake` asserts ours. Where nothing is stored (missing key, expected != ''), torch's libuv
#    server still wakes the waiters, trun-store does not (they are woken by the next write); checked too.
#
# Needs: build/trun-store, torch 1.13 at $TRUN_HOST_PY; torch 2.6 in $TRUN_CHROOT (else the 2.6 half is
# skipped and the test exits 77 when the 1.13 half passed).
set -u
TRUN_REPO=${TRUN_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
TRUN_BUILD=${TRUN_BUILD:-$TRUN_REPO/build}
TRUN_CHROOT=${TRUN_CHROOT:-/var/cache/trun/trixie}
TRUN_HOST_PY=${TRUN_HOST_PY:-/usr/bin/python3}
export TRUN_CHROOT
STORE=$TRUN_BUILD/trun-store
OPS113=("$TRUN_HOST_PY" "$TRUN_REPO/tests/store/ops.py")
OPS26=("$TRUN_REPO/scripts/chroot-run.sh" python3 /trun/tests/store/ops.py)
RAW=("$TRUN_HOST_PY" "$TRUN_REPO/tests/store/raw_ops.py")
SAFETY=150 # seconds; a generous bound for each step, never a measured time

work=$(mktemp -d "${TMPDIR:-/tmp}/trun-10.XXXXXX")
# The process groups started (bg): a file, since the two torch versions' parts run in parallel subshells.
cleanup() {
  local p
  for p in $(cat "$work/pgids" 2>/dev/null); do kill -TERM -- "-$p" 2>/dev/null; done
  sleep 0.3
  for p in $(cat "$work/pgids" 2>/dev/null); do kill -KILL -- "-$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

# Starts "$@" in its own process group (setsid: the pid is the group id); log in $work/$name.log.
bg() {
  local name=$1
  shift
  setsid "$@" >"$work/$name.log" 2>&1 </dev/null &
  echo $! >>"$work/pgids"
  LAST_PID=$!
}
stop() { kill -TERM -- "-$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# start_trun NAME [SERVE-ARGS...]: a fresh trun-store on 127.0.0.1:0; sets PORT and TRUN_PID.
start_trun() {
  local name=$1 i
  shift
  bg "$name" "$STORE" serve --host 127.0.0.1 --port 0 --ready-file "$work/$name.port" "$@"
  TRUN_PID=$LAST_PID
  for ((i = 0; i < SAFETY * 10; i++)); do
    [ -s "$work/$name.port" ] && break
    kill -0 "$TRUN_PID" 2>/dev/null || { cat "$work/$name.log"; echo "trun-store $name died" >&2; exit 1; }
    sleep 0.1
  done
  PORT=$(cat "$work/$name.port")
  grep -q "listening on 127.0.0.1:$PORT" "$work/$name.log" || { echo "no 'listening' line: $(cat "$work/$name.log")" >&2; exit 1; }
  echo "# trun-store $name: pid $TRUN_PID port $PORT"
}

# start_torch NAME CMD...: torch's own server via 'ops.py serve'; sets PORT and TORCH_PID.
start_torch() {
  local name=$1 i
  shift
  bg "$name" "$@" serve
  TORCH_PID=$LAST_PID
  for ((i = 0; i < SAFETY * 10; i++)); do
    PORT=$(awk '/^PORT /{print $2}' "$work/$name.log")
    [ -n "$PORT" ] && break
    kill -0 "$TORCH_PID" 2>/dev/null || { cat "$work/$name.log"; echo "torch server $name died" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$PORT" ] || { echo "torch server $name printed no port" >&2; exit 1; }
  echo "# torch server $name: pid $TORCH_PID port $PORT"
}

failures=0
PART= # the part (in_parallel) that runs a step: its files' suffix
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run_step LABEL CMD...: runs a check, shows its output, counts a failure on a non-zero exit.
run_step() {
  local label=$1 rc
  shift
  echo "== $label"
  timeout --kill-after=5 $SAFETY "$@" >"$work/step$PART.out" 2>"$work/step$PART.err"
  rc=$?
  # torch 2.6 prints C++ warnings and stack frames on stderr for expected errors; keep the log readable.
  grep -v -e '^\[W' -e '^frame #' -e '^Exception raised from' -e '^<omitting' -e '^$' "$work/step$PART.err" | sed 's/^/   stderr: /'
  sed 's/^/   /' "$work/step$PART.out"
  [ $rc -eq 0 ] || fail "$label (exit $rc)"
}

# run_steps VER STEP...: several ops.py checks in one Python process (one torch import instead of one per
# check); STEP is "LABEL|COMMAND ARGS" (wake, adds, caswake). Each check is shown and counted as run_step does.
run_steps() {
  local ver=$1 rc i n=0 out
  shift
  local -a cmd specs=() labels=()
  if [ "$ver" = 113 ]; then cmd=("${OPS113[@]}"); else cmd=("${OPS26[@]}"); fi
  for i in "$@"; do
    labels+=("${i%%|*}")
    specs+=("${i#*|}")
    n=$((n + 1))
  done
  timeout --kill-after=5 $((SAFETY * n)) "${cmd[@]}" steps "${specs[@]}" >"$work/steps$PART.out" 2>"$work/steps$PART.err"
  rc=$?
  for ((i = 0; i < n; i++)); do
    echo "== ${labels[i]}"
    # Its stderr (torch 2.6's C++ warnings for expected errors left out, as in run_step) and its stdout.
    sed -n "/^STEP $i /,/^STEP $((i + 1)) /p" "$work/steps$PART.err" | grep -v -e "^STEP " -e '^\[W' -e '^frame #' \
      -e '^Exception raised from' -e '^<omitting' -e '^$' | sed 's/^/   stderr: /'
    out=$(sed -n "/^STEP $i /,/^STEP $i rc /p" "$work/steps$PART.out")
    grep -v "^STEP " <<<"$out" | sed 's/^/   /'
    grep -qx "STEP $i rc 0" <<<"$out" || fail "${labels[i]} ($(grep -o "^STEP $i rc .*" <<<"$out" || echo "not run: exit $rc"))"
  done
}

# differential VER CMD...: ops.py ops against torch's server and against trun-store, then diff.
# Leaves TORCH_PORT (still running) and TRUN_PORT for the behaviour checks.
differential() {
  local ver=$1 rc
  shift
  start_torch "torch$ver" "$@"
  TORCH_PORT=$PORT
  start_trun "trun$ver"
  TRUN_PORT=$PORT
  for side in torch trun; do
    local port=$TORCH_PORT
    [ $side = trun ] && port=$TRUN_PORT
    timeout --kill-after=5 $SAFETY "$@" ops 127.0.0.1 "$port" >"$work/ops$ver.$side.out" 2>"$work/ops$ver.$side.err"
    rc=$?
    [ $rc -eq 0 ] || fail "ops.py ops (torch $ver client, $side server) exit $rc: $(tail -n 5 "$work/ops$ver.$side.err")"
    grep -q '^OP end$' "$work/ops$ver.$side.out" || fail "ops.py ops (torch $ver, $side server) did not reach the end"
  done
  echo "== torch $ver client: torch's server vs trun-store, $(grep -c '^OP ' "$work/ops$ver.torch.out") ops"
  if diff -u "$work/ops$ver.torch.out" "$work/ops$ver.trun.out" >"$work/ops$ver.diff"; then
    echo "   identical results:"
    paste - - <"$work/ops$ver.trun.out" | sed 's/^/   /'
  else
    fail "torch $ver client: results differ (- torch's server, + trun-store)"
    cat "$work/ops$ver.diff"
  fi
  # The exception messages (client side) are compared too, but only reported: their wording (reset vs EOF)
  # depends on TCP timing, not on the protocol.
  grep '^   (' "$work/ops$ver.torch.err" >"$work/msg$ver.torch" || true
  grep '^   (' "$work/ops$ver.trun.err" >"$work/msg$ver.trun" || true
  if ! diff -u "$work/msg$ver.torch" "$work/msg$ver.trun" >"$work/msg$ver.diff"; then
    echo "   note: exception messages differ (informational):"
    sed 's/^/   /' "$work/msg$ver.diff"
  fi
}

# ---------------------------------------------------------------------------------------------------------
[ -x "$STORE" ] || { echo "no $STORE: run make first" >&2; exit 1; }
if ! "$TRUN_HOST_PY" -c 'import torch.distributed' 2>/dev/null; then
  echo "no torch at $TRUN_HOST_PY (Debian python3-torch 1.13 expected)" >&2
  exit 77
fi
have26=0
[ -f "$TRUN_CHROOT/.trun-ready" ] && have26=1

# in_parallel PART...: runs the functions PART... at the same time, each in a subshell with its own servers
# and files (PART names its step files), then shows each one's output in order. Each part's failures count
# here: its FAIL lines, or one if it exited non-zero without any (a server that did not start). Most of the
# parts' time is waits (time-outs the checks expect, settle times of the waiters), so two run side by side.
in_parallel() {
  local f rc n i=0
  local -a ppids=()
  for f in "$@"; do
    (
      PART=$f failures=0
      "$f"
      [ $failures -eq 0 ]
    ) >"$work/part.$f.log" 2>&1 &
    ppids+=($!)
  done
  for f in "$@"; do
    wait "${ppids[i]}"
    rc=$?
    i=$((i + 1))
    cat "$work/part.$f.log"
    n=$(grep -c '^FAIL: ' "$work/part.$f.log")
    [ $rc -eq 0 ] || [ "$n" -gt 0 ] || { echo "FAIL: part $f exited $rc"; n=1; }
    failures=$((failures + n))
  done
}

# ---- torch 1.13 ----
part113() {
  differential 113 "${OPS113[@]}"
  run_step "1.13 raw: torch 1.13 server closes on GET of a missing key (spec, classic)" "${RAW[@]}" 127.0.0.1 "$TORCH_PORT" legacy classic
  run_step "1.13 raw: trun-store, legacy numbering (intentional difference)" "${RAW[@]}" 127.0.0.1 "$TRUN_PORT" legacy trun
  run_steps 113 "1.13 wake-ups on torch server|wake 127.0.0.1 $TORCH_PORT" \
    "1.13 40 clients x 50 adds on torch server|adds 127.0.0.1 $TORCH_PORT 40 50" \
    "1.13 wake-ups on trun server|wake 127.0.0.1 $TRUN_PORT" \
    "1.13 40 clients x 50 adds on trun server|adds 127.0.0.1 $TRUN_PORT 40 50" \
    "1.13 compare_set on torch's classic server wakes nobody (spec)|caswake 127.0.0.1 $TORCH_PORT nowake" \
    "1.13 compare_set on trun-store wakes waiters (intentional difference)|caswake 127.0.0.1 $TRUN_PORT wake"
  stop "$TORCH_PID"
  kill -0 "$TRUN_PID" 2>/dev/null || fail "trun-store (1.13 part) died"
  stop "$TRUN_PID"
}

# ---- torch 2.6 ----
part26() {
  differential 26 "${OPS26[@]}"
  run_step "2.6 raw: torch 2.6 server closes on GET/MULTI_GET of a missing key (spec, classic)" "${RAW[@]}" 127.0.0.1 "$TORCH_PORT" v2 classic
  run_step "2.6 raw: trun-store, v2 numbering (intentional difference)" "${RAW[@]}" 127.0.0.1 "$TRUN_PORT" v2 trun
  run_steps 26 "2.6 wake-ups and time-outs on torch server|wake 127.0.0.1 $TORCH_PORT" \
    "2.6 40 clients x 50 adds on torch server|adds 127.0.0.1 $TORCH_PORT 40 50" \
    "2.6 wake-ups and time-outs on trun server|wake 127.0.0.1 $TRUN_PORT" \
    "2.6 40 clients x 50 adds on trun server|adds 127.0.0.1 $TRUN_PORT 40 50" \
    "2.6 compare_set on torch's classic server wakes nobody (spec)|caswake 127.0.0.1 $TORCH_PORT nowake" \
    "2.6 compare_set on trun-store wakes waiters (intentional difference)|caswake 127.0.0.1 $TRUN_PORT wake"
  stop "$TORCH_PID"
  kill -0 "$TRUN_PID" 2>/dev/null || fail "trun-store (2.6 part) died"
  stop "$TRUN_PID"
}

# ---- trun-store --threads 4: the same client sequences, connections spread over four loops ----
threads() { # VER
  local ver=$1
  start_trun "threads$ver" --threads 4
  if [ $ver = 113 ]; then cmd=("${OPS113[@]}"); else cmd=("${OPS26[@]}"); fi
  timeout --kill-after=5 $SAFETY "${cmd[@]}" ops 127.0.0.1 "$PORT" >"$work/ops$ver.threads.out" 2>"$work/ops$ver.threads.err" ||
    fail "ops.py ops (torch $ver client, trun-store --threads 4) exit $?: $(tail -n 5 "$work/ops$ver.threads.err")"
  echo "== torch $ver client: torch's server vs trun-store --threads 4"
  if diff -u "$work/ops$ver.torch.out" "$work/ops$ver.threads.out" >"$work/ops$ver.threads.diff"; then
    echo "   identical results ($(grep -c '^OP ' "$work/ops$ver.threads.out") ops)"
  else
    fail "torch $ver client: results differ (- torch's server, + trun-store --threads 4)"
    cat "$work/ops$ver.threads.diff"
  fi
  run_steps $ver "$ver wake-ups and time-outs on trun-store --threads 4|wake 127.0.0.1 $PORT" \
    "$ver 40 clients x 50 adds on trun-store --threads 4|adds 127.0.0.1 $PORT 40 50"
  kill -0 "$TRUN_PID" 2>/dev/null || fail "trun-store --threads 4 ($ver) died"
  stop "$TRUN_PID"
}
threads113() { threads 113; }
threads26() { threads 26; }

if [ $have26 = 1 ]; then
  in_parallel part113 part26

  # ---- 1.13 and 2.6 clients on one trun-store port at the same time ----
  start_trun xver
  echo "== torch 1.13 and torch 2.6 clients on trun-store port $PORT at the same time"
  timeout --kill-after=5 $SAFETY "${OPS113[@]}" xver 127.0.0.1 "$PORT" v113 v26 >"$work/x113.out" 2>&1 &
  x113=$!
  timeout --kill-after=5 $SAFETY "${OPS26[@]}" xver 127.0.0.1 "$PORT" v26 v113 >"$work/x26.out" 2>&1 &
  x26=$!
  wait $x113; rc113=$?
  wait $x26; rc26=$?
  sed 's/^/   1.13: /' "$work/x113.out"
  grep -v -e '^\[W' -e '^frame #' "$work/x26.out" | sed 's/^/   2.6:  /'
  [ $rc113 -eq 0 ] || fail "cross-version: torch 1.13 side exit $rc113"
  [ $rc26 -eq 0 ] || fail "cross-version: torch 2.6 side exit $rc26"
  kill -0 "$TRUN_PID" 2>/dev/null || fail "trun-store (cross-version) died"
  stop "$TRUN_PID"

  in_parallel threads113 threads26
else
  in_parallel part113
  in_parallel threads113
fi

echo "== trun-store logs"
for f in "$work"/trun*.log "$work"/xver.log "$work"/threads*.log; do [ -f "$f" ] && sed "s|^|   $(basename "$f" .log): |" "$f"; done

if [ $failures -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
if [ $have26 = 0 ]; then
  echo "torch 1.13 half passed; torch 2.6 half skipped: no test chroot at $TRUN_CHROOT (make deps)" >&2
  exit 77
fi
echo "all checks passed"
