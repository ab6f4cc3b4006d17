#!/usr/bin/env bash
# The agents' key space against strays and workers (issue 28, "Any client can end a job"): a 2-node static
# job on 127.0.0.1 (real trun agents with one TRUN_RDZV_TOKEN, which their workers do not get; one gloo
# worker each, --rdzv-id j82) runs; while it runs
#  1. a stray client (torch 1.13's own TCPStore client, not of the job) SETs "x/alive/0" and then the
#     round's end key "/trun/j82/r0/end" on one connection: the store closes that connection, the end key
#     stays unset (trun-store cli check), the store's host logs the refusal naming the key, and no agent says
#     "is gone" (a key with /alive/ outside the agents' key space owns nothing);
#  2. a worker of the job (global rank 1, torch's TCPStore at MASTER_ADDR:MASTER_PORT) does the same: its
#     write is refused too (tests/helpers/keys_worker.py records it);
#  3. the job then finishes as if nothing happened: both workers pass a final barrier, both agents exit 0.
# 5. The same stray against a 2-node c10d job (derived token, --rdzv-id j82c): its write of the round's trun
#    end key (/torch.rendezvous.j82c.<round>/trun/end, the round found with trun-store cli check) is refused,
#    torch's own keys stay writable (a stray key of its own there is taken), the job ends with exit 0.
# 4. An agent whose TRUN_RDZV_TOKEN is not node 0's is refused: it exits non-zero with a message naming the
#    token; node 0 (waiting for it) is then stopped by the test. A token of 5 characters exits 2 at once.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-82.XXXXXX")
pids=()
cleanup() { kill_marked; for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
STORE_CLI=$TRUN_BUILD/trun-store
[ -x "$STORE_CLI" ] || fail "$STORE_CLI is not built (run make)"

port=$(free_port)
mkdir -p "$tmp/out"
note "2-node static job on 127.0.0.1:$port, run id j82"
for n in 1 0; do
  TRUN_RDZV_TOKEN=job82-secret-0123456789 "$TRUN" --nnodes 2 --node-rank $n --master-addr 127.0.0.1 --master-port "$port" --nproc-per-node 1 \
    --rdzv-id j82 --max-restarts 0 --monitor-interval 0.1 --log-dir "$tmp/logs$n" \
    "$TRUN_REPO/tests/helpers/keys_worker.py" "$tmp/out" trun/j82/r0/end >"$tmp/agent$n.out" 2>"$tmp/agent$n.err" &
  pids[$n]=$!
done
dump() { for n in 0 1; do echo "== agent $n stdout"; cat "$tmp/agent$n.out"; echo "== agent $n stderr"; cat "$tmp/agent$n.err"; done; }
wait_for "[ -s '$tmp/out/ok.0' ] && [ -s '$tmp/out/ok.1' ]" 180 || { dump; fail "the job's workers did not all-reduce"; }
for n in 0 1; do
  grep -q "token in env: False" "$tmp/out/ok.$n" || { dump; fail "worker $n got TRUN_RDZV_TOKEN: $(cat "$tmp/out/ok.$n")"; }
done

# ---- 1. the stray ----
stray=$("$TRUN_HOST_PY" - "$port" <<'PY'
import datetime, sys
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=30))
s.set("x/alive/0", "stray 1 0")
try:
    s.set("trun/j82/r0/end", "gone:1")
    s.add("keys82/stray", 1)
    print("written")
except Exception as e:
    print("refused: %s" % e)
PY
)
note "stray: $stray"
end=$("$STORE_CLI" cli --target "127.0.0.1:$port" --prefix '' check /trun/j82/r0/end 2>&1)
note "end key set after the stray's write: $end"
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
case $stray in refused*) ;; *) bad "1: the store took a stray's write of the round's end key ($stray)" ;; esac
[ "$end" = false ] || bad "1: the round's end key is set ($end) after a stray's write"
wait_for "grep -q \"trun/j82/r0/end.*without this job's agent token\" '$tmp/agent0.err'" 30 ||
  bad "1: node 0 did not log the refused write naming the key"

# ---- 2. the worker ----
wait_for "[ -f '$tmp/out/attack.1' ]" 60 || bad "2: the worker never reported its write"
w=$(cat "$tmp/out/attack.1" 2>/dev/null)
note "worker: $w"
case $w in refused*) ;; *) bad "2: the store took a worker's write of the round's end key ($w)" ;; esac
end=$("$STORE_CLI" cli --target "127.0.0.1:$port" --prefix '' check /trun/j82/r0/end 2>&1)
[ "$end" = false ] || bad "2: the round's end key is set ($end) after a worker's write"

# ---- 3. the job goes on ----
touch "$tmp/out/go"
wait_agents 180 60 keys_worker "${pids[0]}" "${pids[1]}" || bad "3: the agents did not both exit"
for n in 0 1; do
  rc=${AGENT_RC[${pids[$n]}]:-?}
  [ "$rc" = 0 ] || bad "3: agent $n exited $rc, want 0 (the stray's and the worker's writes must not end the job)"
  [ -f "$tmp/out/done.$n" ] || bad "3: worker $n did not pass the final barrier (the job was disturbed)"
  ! grep -q "is gone" "$tmp/agent$n.err" || bad "3: agent $n took a stray key for a lost node: $(grep 'is gone' "$tmp/agent$n.err")"
done
[ "$failures" = 0 ] || { dump; fail "$failures check(s) failed"; }

# ---- 5. c10d ----
port=$(free_port)
mkdir -p "$tmp/out5"
note "5: 2-node c10d job on 127.0.0.1:$port, run id j82c"
for n in 0 1; do
  "$TRUN" --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id j82c --local-addr 127.0.0.1 \
    --nproc-per-node 1 --max-restarts 0 --monitor-interval 0.1 \
    "$TRUN_REPO/tests/helpers/acl_worker.py" "$tmp/out5" >"$tmp/c$n.out" 2>"$tmp/c$n.err" &
  pids[$((5 + n))]=$!
done
dumpc() { for n in 0 1; do echo "== c10d agent $n stderr"; cat "$tmp/c$n.err"; done; }
wait_for "[ -f '$tmp/out5/ok.0' ] && [ -f '$tmp/out5/ok.1' ]" 180 || { dumpc; fail "5: the c10d job did not all-reduce"; }
live=""
# LIST hides the agents' keys from a client without the token (test 91): the round is found by CHECKs.
find_live() {
  local r
  for r in 0 1 2 3 4 5 6 7; do
    [ "$("$STORE_CLI" cli --target "127.0.0.1:$port" --prefix '' check "/torch.rendezvous.j82c.$r/trun/live/0" 2>/dev/null)" = true ] &&
      { live=/torch.rendezvous.j82c.$r/trun/live/0; return 0; }
  done
  return 1
}
wait_for find_live 60 ||
  { dumpc; fail "5: no trun liveness key of the c10d round in the store"; }
ks=${live%/live/*}
note "5: the round's trun key space: $ks"
stray=$("$TRUN_HOST_PY" - "$port" "${ks#/}/end" "${ks%/trun}/stray82" <<'PY'
import datetime, sys
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=30))
s.set(sys.argv[3].lstrip("/"), "a key of torch's space")
s.set("x/alive/0", "stray 1 0")
try:
    s.set(sys.argv[2], "gone:1")
    s.add("keys82/stray", 1)
    print("written")
except Exception as e:
    print("refused: %s" % e)
PY
)
note "5: stray: $stray"
case $stray in refused*) ;; *) dumpc; fail "5: the c10d store took a stray's write of $ks/end ($stray)" ;; esac
end=$("$STORE_CLI" cli --target "127.0.0.1:$port" --prefix '' check "$ks/end" 2>&1)
[ "$end" = false ] || { dumpc; fail "5: $ks/end is set ($end) after a stray's write"; }
own=$("$STORE_CLI" cli --target "127.0.0.1:$port" --prefix '' check "${ks%/trun}/stray82" 2>&1)
[ "$own" = true ] || { dumpc; fail "5: a key of torch's round space was not taken ($own)"; }
touch "$tmp/out5/go"
for n in 0 1; do
  wait_pid_exit "${pids[$((5 + n))]}" 180 || { dumpc; fail "5: c10d agent $n did not finish"; }
  [ "$WAIT_RC" = 0 ] || { dumpc; fail "5: c10d agent $n exited $WAIT_RC, want 0"; }
  ! grep -q "is gone" "$tmp/c$n.err" || { dumpc; fail "5: c10d agent $n took a stray key for a lost node"; }
done

# ---- 4. tokens ----
port=$(free_port)
mkdir -p "$tmp/out4"
note "4: node 1 with another TRUN_RDZV_TOKEN than node 0's, port $port"
TRUN_RDZV_TOKEN=node0-secret-0123456789 "$TRUN" --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 \
  --master-port "$port" --nproc-per-node 1 --rdzv-id j82b --max-restarts 0 \
  "$TRUN_REPO/tests/helpers/keys_worker.py" "$tmp/out4" trun/j82b/r0/end >"$tmp/t0.out" 2>"$tmp/t0.err" &
pids[2]=$!
TRUN_RDZV_TOKEN=node1-other-0123456789 "$TRUN" --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 \
  --master-port "$port" --nproc-per-node 1 --rdzv-id j82b --max-restarts 0 \
  "$TRUN_REPO/tests/helpers/keys_worker.py" "$tmp/out4" trun/j82b/r0/end >"$tmp/t1.out" 2>"$tmp/t1.err" &
pids[3]=$!
wait_pid_exit "${pids[3]}" 120 || { cat "$tmp/t1.err"; fail "4: node 1 with a wrong token still runs"; }
note "4: node 1 exited $WAIT_RC"
[ "$WAIT_RC" != 0 ] || fail "4: node 1 with a wrong token exited 0"
grep -q "TRUN_RDZV_TOKEN" "$tmp/t1.err" || { cat "$tmp/t1.err"; fail "4: node 1's error does not name the token"; }
grep -q "agent token that is not this job's" "$tmp/t0.err" || { cat "$tmp/t0.err"; fail "4: node 0 did not log the wrong token"; }
[ ! -e "$tmp/out4/ok.0" ] || fail "4: workers ran with a node of another token"
kill -TERM "${pids[2]}" 2>/dev/null
wait_pid_exit "${pids[2]}" 120 || fail "4: node 0 did not stop on SIGTERM"
rc=0
TRUN_RDZV_TOKEN=short "$TRUN" --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" \
  --nproc-per-node 1 "$TRUN_REPO/tests/helpers/keys_worker.py" "$tmp/out4" x >"$tmp/t2.out" 2>"$tmp/t2.err" || rc=$?
[ "$rc" = 2 ] || { cat "$tmp/t2.err"; fail "4: a 5-character TRUN_RDZV_TOKEN exited $rc, want 2"; }
grep -q "16 to 100" "$tmp/t2.err" || { cat "$tmp/t2.err"; fail "4: the short token's error does not say the rule"; }
echo "PASS"
