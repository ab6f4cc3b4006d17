#!/usr/bin/env bash
# --node-rank as a rank hint with the `trun` rendezvous (--rdzv-backend trun), end to end on loopback: three
# agents with hints 2, 0, 1 join in that order (each waits until the one before it has joined, so the join
# order is the reverse of what the hints ask); every agent's workers must get GROUP_RANK = its hint and
# RANK = hint * nproc + LOCAL_RANK. Without hints, the same start order gives GROUP_RANK in join order
# (deterministic: the order of the join ADD). Workers: tests/helpers/dumpenv.py (no torch needed).
# Exit: 0 pass, 77 skip, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch

# run_three MODE: starts agents a, b, c (hints 2, 0, 1 when MODE=hints), each once the previous one's join
# shows in its log, and waits for them. Outputs in $tmp/MODE/<agent>/env.<local_rank>.json.
run_three() {
  local mode=$1 port pids=() i name hint
  port=$("$host_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  local names=(a b c) hints=(2 0 1)
  for i in 0 1 2; do
    name=${names[$i]}
    mkdir -p "$tmp/$mode/$name"
    local extra=()
    [ "$mode" = hints ] && extra=(--node-rank "${hints[$i]}")
    TRUN_LOG_LEVEL=debug trun_run --nnodes 3 --nproc-per-node 2 --rdzv-backend trun \
      --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "hints-$mode" "${extra[@]}" --rdzv-conf last_call_timeout=1 \
      "$repo/tests/helpers/dumpenv.py" "$tmp/$mode/$name" >"$tmp/$mode/$name.out" 2>"$tmp/$mode/$name.err" &
    pids+=($!)
    # The next agent starts once this one holds its join ticket (its debug line).
    local t
    for t in $(seq 300); do
      grep -q "joined as number" "$tmp/$mode/$name.err" 2>/dev/null && break
      sleep 0.1
    done
    [ "$t" -lt 300 ] || fail "$mode: agent $name did not join within 30 s: $(cat "$tmp/$mode/$name.err")"
  done
  for i in 0 1 2; do
    local rc=0
    wait "${pids[$i]}" || rc=$?
    [ $rc -eq 0 ] || fail "$mode: agent ${names[$i]} exited $rc: $(cat "$tmp/$mode/${names[$i]}.err")"
  done
}

# check MODE AGENT WANT_GROUP_RANK
check() {
  local mode=$1 name=$2 want=$3 lr
  for lr in 0 1; do
    "$host_py" - "$tmp/$mode/$name/env.$lr.json" "$want" "$lr" <<'PY' || fail "$mode: agent $name local rank $lr"
import json, sys
env = json.load(open(sys.argv[1]))
g, lr = int(sys.argv[2]), int(sys.argv[3])
got = (env["GROUP_RANK"], env["RANK"], env["WORLD_SIZE"], env["GROUP_WORLD_SIZE"])
want = (str(g), str(g * 2 + lr), "6", "3")
print(sys.argv[1], "GROUP_RANK RANK WORLD_SIZE GROUP_WORLD_SIZE =", got, "want", want)
sys.exit(0 if got == want else 1)
PY
  done
}

run_three hints
check hints a 2
check hints b 0
check hints c 1
run_three nohints
check nohints a 0
check nohints b 1
check nohints c 2
echo "ok: hints 2, 0, 1 honoured whatever the join order; without hints, the join order"
