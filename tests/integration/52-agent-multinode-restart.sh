#!/usr/bin/env bash
# Static rendezvous, 2 trun agents on 127.0.0.1 x 2 workers (global ranks 0,1 on node 0; 2,3 on node 1).
# Global rank 3 (node 1, local rank 1) exits 3 in attempt 0 (TORCHELASTIC_RESTART_COUNT=0); every other rank
# is then blocked in init_process_group.
#  A. --max-restarts 1: BOTH agents restart their workers (node 0 learns of node 1's failure through the
#     store); in attempt 1 all 4 ranks see TORCHELASTIC_RESTART_COUNT=1 (recorded in files), the gloo
#     all-reduce gives 0+1+2+3 = 6, and both agents exit 0.
#  B. --max-restarts 0: both agents exit 1; node 0's stderr holds the job-wide failure report naming global
#     rank 3 (local_rank 1), node 1's host (the FQDN) and exit code 3.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-52.XXXXXX")
pids=()
cleanup() { kill_marked; for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }

run_pair() { # dir max_restarts
  local d=$1 mr=$2 port; port=$(free_port)
  mkdir -p "$d/out"
  note "scenario $d: --max-restarts $mr, port $port, rank 3 exits 3 in attempt 0"
  for n in 1 0; do
    MN_OUT=$d/out MN_FAIL_RANK=3 MN_FAIL_CODE=3 MN_FAIL_ATTEMPT=0 "$TRUN" --nnodes 2 --node-rank $n \
      --master-addr 127.0.0.1 --master-port "$port" --nproc-per-node 2 --max-restarts "$mr" \
      --monitor-interval 0.1 --log-dir "$d/logs$n" "$TRUN_REPO/tests/helpers/mn_worker.py" \
      >"$d/agent$n.out" 2>"$d/agent$n.err" &
    pids[$n]=$!
  done
  local ok=0
  wait_agents 250 60 "python3 -u" "${pids[0]}" "${pids[1]}" || ok=1
  for n in 0 1; do dump_agent "$(basename "$d") agent $n" "$d/agent$n.out" "$d/agent$n.err"; done
  echo "records: $(cd "$d/out" && ls | tr '\n' ' ')"
  return $ok
}

# ---- A: one restart, both nodes restart together ----
A=$tmp/A
if run_pair "$A" 1; then
  for n in 0 1; do
    rc=${AGENT_RC[${pids[$n]}]}
    [ "$rc" = 0 ] || bad "A: agent $n exited $rc, want 0 (both nodes restart, attempt 1 succeeds)"
  done
else
  bad "A: the agents did not all exit (see above)"
fi
grep -q 'failing with exit code 3 in attempt 0' "$A/agent1.out" || bad "A: rank 3 never failed in attempt 0"
for r in 0 1; do
  f=$A/out/rank$r.attempt1.json
  if [ -f "$f" ]; then
    c=$("$TRUN_HOST_PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["TORCHELASTIC_RESTART_COUNT"])' "$f")
    echo "A: node 0 rank $r in attempt 1 saw TORCHELASTIC_RESTART_COUNT=$c"
    [ "$c" = 1 ] || bad "A: node 0 rank $r saw TORCHELASTIC_RESTART_COUNT=$c in attempt 1, want 1"
  else
    bad "A: node 0's rank $r never ran attempt 1 (no $f): node 0 did not restart with node 1"
  fi
done
"$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/mn_check_ranks.py" "$A" 2 2 127.0.0.1 1 || bad "A: attempt 1 rank checks failed"
kill_marked

# ---- B: no restart, both fail, job-wide report on node 0 ----
B=$tmp/B
if run_pair "$B" 0; then
  for n in 0 1; do
    rc=${AGENT_RC[${pids[$n]}]}
    [ "$rc" = 1 ] || bad "B: agent $n exited $rc, want 1"
  done
else
  bad "B: the agents did not all exit (see above)"
fi
ls "$B/out" | grep -q 'attempt1' && bad "B: some worker ran an attempt 1 with --max-restarts 0"
fqdn=$("$TRUN_HOST_PY" -c 'import socket; print(socket.getfqdn())')
"$TRUN_HOST_PY" - "$B/agent0.err" "$fqdn" <<'PY' || bad "B: node 0's stderr lacks the job-wide report naming rank 3, host $fqdn, exit code 3"
import re, sys
text = open(sys.argv[1]).read()
fqdn = sys.argv[2]
# Report blocks: "[i]:" followed by "  key : value" lines.
blocks, cur = [], None
for line in text.splitlines():
    if re.match(r"^\[\d+\]:\s*$", line):
        cur = {}
        blocks.append(cur)
    elif cur is not None:
        m = re.match(r"^\s+(\w+)\s*:\s*(.*)$", line)
        if m:
            cur[m.group(1)] = m.group(2)
        else:
            cur = None
print("report blocks on node 0:", blocks)
hit = [b for b in blocks if re.match(r"3 \(local_rank: 1\)", b.get("rank", "")) and
       re.match(r"3( |$)", b.get("exitcode", ""))]
if not hit:
    print("no block with rank 3 (local_rank: 1) and exitcode 3")
    sys.exit(1)
if hit[0].get("host") != fqdn:
    print("rank 3's block names host %r, want %r" % (hit[0].get("host"), fqdn))
    sys.exit(1)
root = text.split("Root Cause", 1)
if len(root) < 2 or not re.search(r"rank\s*:\s*3 \(local_rank: 1\)\s*\n\s*exitcode\s*:\s*3\b", root[1]):
    print("rank 3 exit code 3 is not the root cause")
    sys.exit(1)
print("job-wide report names rank 3 on %s with exit code 3 as the root cause" % fqdn)
PY

[ $failures = 0 ] || fail "$failures check(s) failed"
echo "PASS: both nodes restarted together (RESTART_COUNT=1 on node 0), and without restarts both exit 1 with the job-wide report"
