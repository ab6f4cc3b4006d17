#!/usr/bin/env bash
# Failures and restarts (trun --standalone --nproc-per-node 2):
#  - rank 1 does a gloo all-reduce then exits 3 in attempt 0, succeeds in attempt 1 (tests/helpers/allreduce.py
#    --fail-rank 1): --max-restarts=1 => exit 0 and every rank re-initialised gloo and all-reduced in attempt 1
#    on the same store (torch 1.13 on the host; torch 2.6 in the chroot, whose workers use unprefixed keys,
#    so trun must not leave attempt 0's keys behind); --max-restarts=0 => exit 1 and the failure report on
#    stderr names rank 1, the host, exit code 3;
#  - a worker whose @record main raises ValueError("boom") => exit 1, the report carries "ValueError: boom"
#    from the error file;
#  - a worker that kills itself with SIGSEGV => exit 1, the report says SIGSEGV.
# Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
fqdn=$("$host_py" -c 'import socket; print(socket.getfqdn())')

# run NAME WANT_RC trun-args...: output in $tmp/NAME.{out,err}.
run() {
  local name=$1 want=$2
  shift 2
  echo "== $name: trun $*"
  local rc=0
  trun_run "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  sed 's/^/    out| /' "$tmp/$name.out"
  sed 's/^/    err| /' "$tmp/$name.err"
  [ $rc -eq "$want" ] || fail "$name: trun exited $rc, want $want"
}

# expect_ok NAME ATTEMPT NPROC: every rank left ok.ATTEMPT.<rank>.
expect_ok() {
  for ((r = 0; r < $3; r++)); do
    [ -f "$tmp/$1/ok.$2.$r" ] || fail "$1: rank $r did not finish its all-reduce in attempt $2"
  done
}

# 1. torch 1.13: attempt 0 fails on rank 1, attempt 1 re-initialises gloo on the same store.
mkdir -p "$tmp/restart113"
run restart113 0 --standalone --nproc-per-node 2 --max-restarts=1 "$repo/tests/helpers/allreduce.py" \
  "$tmp/restart113" --fail-rank 1
expect_ok restart113 1 2
[ -f "$tmp/restart113/ok.0.1" ] && fail "restart113: rank 1 should have failed attempt 0"
grep -q "failing attempt 0 on purpose" "$tmp/restart113.out" || fail "restart113: rank 1 did not fail attempt 0"

# 1b. The same with the output redirected into --log-dir: one run dir, attempt_0 and attempt_1 inside, rank 1's
# failure message in attempt_0's stdout.log, attempt 1's success lines in attempt_1.
mkdir -p "$tmp/restartlogs"
run restartlogs 0 --standalone --nproc-per-node 2 --max-restarts=1 --log-dir "$tmp/restartlogs.d" --redirects 3 \
  "$repo/tests/helpers/allreduce.py" "$tmp/restartlogs" --fail-rank 1
expect_ok restartlogs 1 2
rd=$(echo "$tmp/restartlogs.d"/*)
[ -d "$rd" ] || fail "restartlogs: no run dir in $tmp/restartlogs.d"
grep -q "failing attempt 0 on purpose" "$rd/attempt_0/1/stdout.log" || fail "restartlogs: attempt_0/1/stdout.log lacks the failure"
for r in 0 1; do
  grep -q "attempt 1: all_reduce ok" "$rd/attempt_1/$r/stdout.log" || fail "restartlogs: attempt_1/$r/stdout.log lacks the success line"
done

# 2. No restarts left: exit 1, the report names rank, host, exit code.
mkdir -p "$tmp/norestart"
run norestart 1 --standalone --nproc-per-node 2 --max-restarts=0 "$repo/tests/helpers/allreduce.py" \
  "$tmp/norestart" --fail-rank 1
expect_root norestart "^ *rank +: 1 \(local_rank: 1\)$" "^ *host +: $fqdn$" "^ *exitcode +: 3 \(pid: [0-9]+\)$"
grep -q "allreduce.py FAILED" "$tmp/norestart.err" || fail "norestart: no '<script> FAILED' banner"
[ -f "$tmp/norestart/ok.1.0" ] && fail "norestart: a second attempt ran with --max-restarts=0"

# 3. @record error file.
run record 1 --standalone --nproc-per-node 2 "$repo/tests/helpers/fail.py" record
expect_root record "^ *rank +: 1 \(local_rank: 1\)$" "^ *host +: $fqdn$" "^ *exitcode +: 1 \(pid: [0-9]+\)$" \
  "^ *error_file: /.*/attempt_0/1/error\.json$" "ValueError: boom"

# 4. SIGSEGV.
run segv 1 --standalone --nproc-per-node 2 "$repo/tests/helpers/fail.py" segv
expect_root segv "^ *rank +: 1 \(local_rank: 1\)$" "^ *exitcode +: -11 \(pid: [0-9]+\)" "SIGSEGV"

# 5. torch 2.6 workers (chroot): the same restart, unprefixed keys on the same store.
need_chroot
mkdir -p "$tmp/restart26"
run restart26 0 --standalone --nproc-per-node 2 --max-restarts=1 --no-python "$repo/scripts/chroot-run.sh" \
  --keep-env python3 /trun/tests/helpers/allreduce.py "$tmp/restart26" --fail-rank 1
expect_ok restart26 1 2
grep -q "failing attempt 0 on purpose" "$tmp/restart26.out" || fail "restart26: rank 1 did not fail attempt 0"
grep -q "2\.6" "$tmp/restart26/ok.1.0" || fail "restart26: the workers did not run torch 2.6"
echo PASS
