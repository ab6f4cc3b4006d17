#!/usr/bin/env bash
# TORCHELASTIC_HEALTH_CHECK_PORT (torch >= 2.4's agent health check) answered by trun on its loop, and the
# exit barrier's timeout:
#  1. port 0: the port is printed; GET answers 200 {"alive": true, "last_progress_time": now, "timeout_s": 60}
#     (torch's alive callback and timeout; "file_timer": false without the watchdog); attacked while the job
#     runs (tests/helpers/probe_attack.py: 230 held idle / garbage / half-request connections, oversized and
#     garbage heads, reset clients) a probe still answers at once, and the job then ends normally (exit 0);
#     the port is closed after the job;
#  2. with TORCHELASTIC_ENABLE_FILE_TIMER=1 the liveness is the watchdog's: "file_timer": true;
#  3. a port that is not a number, out of range, or already in use: exit 2 with one line naming the variable;
#  4. --exit-barrier-timeout (pytorch#157318): two c10d agents on loopback, node B's worker done at once, node
#     A's still running: B leaves the exit barrier after the timeout (exit 0, the warning names 3 s) while A
#     runs on; A then finishes (exit 0). PET_EXIT_BARRIER_TIMEOUT reaches --print-config
#     (TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT and bad values: tests/unit/test_config.c).
# Exit: 0 pass, 77 skip, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
need_cmd curl curl
need_cmd ss iproute2
cat >"$tmp/wait.py" <<'PY'
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.1)
PY

# start NAME [env...]: trun in the background, its pid in $job and its probe port in $port.
start() {
  local name=$1
  shift
  env "$@" TORCHELASTIC_HEALTH_CHECK_PORT=0 PYTHON_EXEC=$host_py setsid "$trun" --standalone --nproc-per-node 2 \
    "$tmp/wait.py" "$tmp/$name.go" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  job=$!
  _bg_pgids+=("$job")
  local t=0
  until grep -q 'answering health probes on port' "$tmp/$name.err"; do
    kill -0 "$job" 2>/dev/null || { cat "$tmp/$name.err" >&2; fail "$name: trun ended before the probe port"; }
    [ $((t += 1)) -lt 600 ] || fail "$name: no 'answering health probes on port' line within 120 s"
    sleep 0.2
  done
  port=$(sed -n 's/.*answering health probes on port \([0-9]*\).*/\1/p' "$tmp/$name.err" | head -n1)
  echo "== $name: probe port $port"
}

# finish NAME: lets the workers end; trun must exit 0 and the port be closed.
finish() {
  touch "$tmp/$1.go"
  local rc=0
  wait "$job" || rc=$?
  sed 's/^/    err| /' "$tmp/$1.err"
  [ $rc -eq 0 ] || fail "$1: trun exited $rc, want 0"
  curl -s "http://127.0.0.1:$port/" >/dev/null 2>&1 && fail "$1: port $port still answers after the job"
  return 0
}

# 1. The probe, attacked.
start plain
curl -sf -i "http://127.0.0.1:$port/health" >"$tmp/r1.txt" || fail "plain: GET failed"
sed 's/^/    probe| /' "$tmp/r1.txt"
grep -q '^HTTP/1.1 200 OK' "$tmp/r1.txt" || fail "plain: not 200"
grep -q '"alive": true, "last_progress_time": [0-9]*, "timeout_s": 60, "file_timer": false' "$tmp/r1.txt" ||
  fail "plain: unexpected body"
"$host_py" "$repo/tests/helpers/probe_attack.py" 127.0.0.1 "$port" || fail "plain: the probe did not survive the attack"
curl -sf "http://127.0.0.1:$port/" | grep -q '"alive": true' || fail "plain: no answer after the attack"
finish plain

# 2. With the file-timer watchdog.
start watched TORCHELASTIC_ENABLE_FILE_TIMER=1
curl -sf "http://127.0.0.1:$port/" >"$tmp/r2.txt" || fail "watched: GET failed"
grep -q '"alive": true, .*"file_timer": true' "$tmp/r2.txt" || fail "watched: $(cat "$tmp/r2.txt")"
# 3. The same port again while it is in use: exit 2.
rc=0
TORCHELASTIC_HEALTH_CHECK_PORT=$port trun_run --standalone "$tmp/wait.py" "$tmp/never" 2>"$tmp/busy.err" || rc=$?
[ $rc -eq 2 ] || fail "busy port: exit $rc, want 2: $(cat "$tmp/busy.err")"
grep -q "TORCHELASTIC_HEALTH_CHECK_PORT=$port: cannot listen" "$tmp/busy.err" || fail "busy port: $(cat "$tmp/busy.err")"
finish watched

for v in abc 70000 -1 ''; do
  rc=0
  TORCHELASTIC_HEALTH_CHECK_PORT=$v trun_run --standalone "$tmp/wait.py" "$tmp/never" 2>"$tmp/bad.err" || rc=$?
  [ $rc -eq 2 ] || fail "TORCHELASTIC_HEALTH_CHECK_PORT='$v': exit $rc, want 2: $(cat "$tmp/bad.err")"
  grep -q "TORCHELASTIC_HEALTH_CHECK_PORT='$v' is not a port" "$tmp/bad.err" ||
    fail "TORCHELASTIC_HEALTH_CHECK_PORT='$v': $(cat "$tmp/bad.err")"
done

# 4. --exit-barrier-timeout.
cat >"$tmp/w2.py" <<'PY'
import os, sys, time
if os.environ["GROUP_RANK"] == "0":
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.1)
print("rank", os.environ["RANK"], "done", flush=True)
PY
rport=$("$host_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
c10d=(--nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$rport" --rdzv-id eb
  --local-addr 127.0.0.1)
# A first: it joins first (group rank 0, its worker waits for the go file) and hosts the store.
PYTHON_EXEC=$host_py setsid "$trun" "${c10d[@]}" "$tmp/w2.py" "$tmp/eb.go" >"$tmp/ebA.out" 2>"$tmp/ebA.err" &
ja=$!
_bg_pgids+=("$ja")
until ss -ltn "sport = :$rport" | grep -q LISTEN; do
  kill -0 "$ja" 2>/dev/null || fail "exit barrier: node A ended early: $(cat "$tmp/ebA.err")"
  sleep 0.2
done
rc=0
trun_run "${c10d[@]}" --exit-barrier-timeout 3 "$tmp/w2.py" "$tmp/eb.go" >"$tmp/ebB.out" 2>"$tmp/ebB.err" || rc=$?
sed 's/^/    B| /' "$tmp/ebB.out" "$tmp/ebB.err"
[ $rc -eq 0 ] || fail "exit barrier: node B exited $rc, want 0"
grep -q "rank 1 done" "$tmp/ebB.out" || fail "exit barrier: node B's worker (rank 1) did not run"
grep -q "exit barrier of c10d round .*waited up to 3 s" "$tmp/ebB.err" ||
  fail "exit barrier: node B did not time out its barrier after 3 s"
kill -0 "$ja" 2>/dev/null || fail "exit barrier: node A ended before its worker was let go"
touch "$tmp/eb.go"
rc=0
wait "$ja" || rc=$?
sed 's/^/    A| /' "$tmp/ebA.out" "$tmp/ebA.err"
[ $rc -eq 0 ] || fail "exit barrier: node A exited $rc, want 0"
PET_EXIT_BARRIER_TIMEOUT=12 "$trun" --print-config "$tmp/w2.py" | grep -Eq '^exit-barrier-timeout: 12 +# env PET_EXIT_BARRIER_TIMEOUT' ||
  fail "PET_EXIT_BARRIER_TIMEOUT does not reach --print-config"
echo PASS
