#!/usr/bin/env bash
# trun's command line: bad command lines exit 2 with exactly one stderr line naming the problem (and start
# nothing); --help (exit 0, options in groups); --version; --dry-run prints each local rank's RANK/LOCAL_RANK/
# WORLD_SIZE and argv and starts nothing, names the backend and shows only the ranks the rendezvous knows in
# advance (static's; c10d and trun decide them when the nodes meet); PET_NPROC_PER_NODE is the fallback and the command line beats it;
# torch's built-in --event-log-handler (null, console, dynamic_rendezvous) and --logs-specs (default) names run.
# Workers are tests/helpers/touch.py (creates ran.<local_rank>: proof that something ran). No torch needed.
# Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
w=$repo/tests/helpers/touch.py
out=$tmp/ran
mkdir -p "$out"

# bad NAME REGEX ARGS...: exit 2, empty stdout, exactly one stderr line that matches REGEX (extended, case-
# insensitive), and no worker ran.
bad() {
  local name=$1 re=$2
  shift 2
  local rc=0
  trun_run "$@" >"$tmp/o" 2>"$tmp/e" || rc=$?
  echo "== $name: trun $* -> rc $rc: $(cat "$tmp/e")"
  [ $rc -eq 2 ] || fail "$name: exit $rc, want 2 (stderr: $(cat "$tmp/e"))"
  [ ! -s "$tmp/o" ] || fail "$name: stdout should be empty, got: $(cat "$tmp/o")"
  [ "$(wc -l <"$tmp/e")" -eq 1 ] || fail "$name: want exactly one stderr line, got $(wc -l <"$tmp/e"):
$(cat "$tmp/e")"
  grep -Eiq -- "$re" "$tmp/e" || fail "$name: the stderr line does not name the problem (/$re/): $(cat "$tmp/e")"
  [ -z "$(ls "$out")" ] || fail "$name: a worker ran: $(ls "$out")"
}

bad unknown-option "--bogus" --bogus 1 "$w" "$out"
bad unknown-short "-x|unrecognized|unknown" -x "$w" "$out"
bad nnodes-0 "--nnodes.*'?0'?" --nnodes 0 "$w" "$out"
bad nnodes-range "--nnodes" --nnodes 2:1 --rdzv-backend c10d "$w" "$out"
bad nnodes-3-fields "--nnodes" --nnodes 1:2:3 "$w" "$out"
bad node-rank "--node-rank.*3" --node-rank 3 --nnodes 2 "$w" "$out"
bad missing-script "training_script" --nproc-per-node 2
bad missing-script-none "training_script"
bad nproc-0 "--nproc-per-node.*'?0'?" --nproc-per-node 0 "$w" "$out"
bad event-log-handler "--event-log-handler 'file' is not an event log handler" --event-log-handler file "$w" "$out"
bad logs-specs "--logs-specs 'mine' is not a torchrun.logs_specs" --logs-specs mine "$w" "$out"
bad exit-barrier-timeout "--exit-barrier-timeout '-3'" --exit-barrier-timeout -3 "$w" "$out"
bad nproc-word "--nproc-per-node" --nproc-per-node lots "$w" "$out"
bad redirects-5 "--redirects.*5" --redirects 5 "$w" "$out"
bad redirects-junk "--redirects.*bad" --redirects bad "$w" "$out"
bad redirects-map "--redirects.*0:7" --redirects 0:7 "$w" "$out"
bad tee-junk "--tee.*x" --tee x "$w" "$out"
bad max-restarts "--max-restarts" --max-restarts -1 "$w" "$out"
bad value-missing "--nproc-per-node" --nproc-per-node
bad module-no-python "--no-python" -m --no-python "$w" "$out"
# --rdzv-conf values of the c10d backend (checked before anything connects: the endpoint is never asked).
c10d=(--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:1 --nnodes 1)
bad rdzv-conf-word "--rdzv-conf join_timeout=abc: must be a positive whole number of seconds" \
  "${c10d[@]}" --rdzv-conf join_timeout=abc "$w" "$out"
bad rdzv-conf-negative "--rdzv-conf join_timeout=-5: must be a positive" \
  "${c10d[@]}" --rdzv-conf join_timeout=-5 "$w" "$out"
bad rdzv-conf-empty "--rdzv-conf last_call_timeout=: must be a positive" \
  "${c10d[@]}" --rdzv-conf last_call_timeout= "$w" "$out"
bad rdzv-conf-attempts "--rdzv-conf keep_alive_max_attempt=0: must be a positive whole number of attempts" \
  "${c10d[@]}" --rdzv-conf keep_alive_max_attempt=0 "$w" "$out"
bad rdzv-conf-bool "--rdzv-conf is_host=maybe: use true or false" \
  "${c10d[@]}" --rdzv-conf is_host=maybe "$w" "$out"
bad rdzv-conf-timeout-fast "--rdzv-conf" --rdzv-backend trun --rdzv-endpoint 127.0.0.1:1 --nnodes 1 \
  --rdzv-conf join_timeout=x "$w" "$out"
# An unknown --rdzv-conf key is a warning naming it (torchrun ignores unknown keys too); the job runs.
port=$("$host_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rc=0
trun_run --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --nnodes 1 --rdzv-conf bogus_key=1 \
  "$w" "$out" >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc -eq 0 ] || fail "unknown --rdzv-conf key: exit $rc, want 0: $(cat "$tmp/e")"
grep -q "warning: --rdzv-conf: key 'bogus_key' is not used by trun's c10d backend (ignored)" "$tmp/e" ||
  fail "unknown --rdzv-conf key: no warning naming it: $(cat "$tmp/e")"
[ -e "$out/ran.0" ] || fail "unknown --rdzv-conf key: the worker did not run"
rm -f "$out"/ran.*
PET_NPROC_PER_NODE=0 bad env-nproc-0 "PET_NPROC_PER_NODE" "$w" "$out"
PET_REDIRECTS=9 bad env-redirects "PET_REDIRECTS" "$w" "$out"

# --help: exit 0, usage + the option groups (torchrun's headings) and the options in them.
rc=0
trun_run --help >"$tmp/help" 2>"$tmp/help.err" || rc=$?
[ $rc -eq 0 ] || fail "--help exited $rc"
[ ! -s "$tmp/help.err" ] || fail "--help wrote to stderr: $(cat "$tmp/help.err")"
head -n 1 "$tmp/help" | grep -q '^usage: trun' || fail "--help does not start with 'usage: trun'"
for g in "Worker/node size related arguments:" "Rendezvous related arguments:" \
  "User-code launch related arguments:" "Backwards compatible parameters with caffe2.distributed.launch:"; do
  grep -qxF -- "$g" "$tmp/help" || fail "--help lacks the group heading '$g'"
done
# Each option appears after its group's heading (and before the next heading).
section() { awk -v h="$1" '$0 == h {on = 1; next} /^[A-Za-z].*:$/ {on = 0} on' "$tmp/help"; }
section "Worker/node size related arguments:" | grep -q -- "--nproc-per-node" || fail "--help: --nproc-per-node not in its group"
section "Worker/node size related arguments:" | grep -q -- "--nnodes" || fail "--help: --nnodes not in its group"
section "Rendezvous related arguments:" | grep -q -- "--rdzv-endpoint" || fail "--help: --rdzv-endpoint not in its group"
section "Rendezvous related arguments:" | grep -q -- "--standalone" || fail "--help: --standalone not in its group"
section "User-code launch related arguments:" | grep -q -- "--redirects" || fail "--help: --redirects not in its group"
section "User-code launch related arguments:" | grep -q -- "--max-restarts" || fail "--help: --max-restarts not in its group"
section "Backwards compatible parameters with caffe2.distributed.launch:" | grep -q -- "--master-addr" ||
  fail "--help: --master-addr not in its group"
grep -q -- "PET_NPROC_PER_NODE" "$tmp/help" || fail "--help does not name the PET_* fallbacks"
trun_run -h >"$tmp/h2" 2>&1 || fail "-h exited non-zero"
cmp -s "$tmp/help" "$tmp/h2" || fail "-h and --help differ"
echo "ok: --help"

# --version: exit 0, one line naming trun and a version number.
rc=0
trun_run --version >"$tmp/ver" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "--version exited $rc"
[ "$(wc -l <"$tmp/ver")" -eq 1 ] && grep -Eq '^trun [0-9]+\.[0-9]+' "$tmp/ver" || fail "--version printed: $(cat "$tmp/ver")"
echo "ok: --version: $(cat "$tmp/ver")"

# --dry-run: per local rank RANK/LOCAL_RANK/WORLD_SIZE, NCCL_RAS_ADDR and PYTHONFAULTHANDLER, and argv; nothing
# runs.
rc=0
(unset NCCL_RAS_ADDR PYTHONFAULTHANDLER && trun_run --dry-run --nproc-per-node 2 "$w" "$out" a b) >"$tmp/dry" 2>"$tmp/dry.err" ||
  rc=$?
sed 's/^/    /' "$tmp/dry" "$tmp/dry.err"
[ $rc -eq 0 ] || fail "--dry-run exited $rc"
[ -z "$(ls "$out")" ] || fail "--dry-run started a worker: $(ls "$out")"
"$host_py" - "$tmp/dry" "$w" "$out" <<'PY' || fail "--dry-run output is wrong (above)"
import re, sys
text = open(sys.argv[1]).read()
w, out = sys.argv[2], sys.argv[3]
blocks = re.split(r"^(?=local rank \d+:)", text, flags=re.M)[1:]
assert len(blocks) == 2, "want 2 local-rank blocks, got %d" % len(blocks)
for lr, b in enumerate(blocks):
    first = b.splitlines()[0]
    assert first.startswith("local rank %d:" % lr), first
    argv = first.split(":", 1)[1].split()
    assert argv[-4:] == [w, out, "a", "b"], argv
    assert argv[0].endswith("python3") and argv[1] == "-u", argv
    env = dict(l.strip().split("=", 1) for l in b.splitlines()[1:] if "=" in l and l.startswith("  "))
    for k, v in (("RANK", lr), ("LOCAL_RANK", lr), ("WORLD_SIZE", 2)):
        assert env.get(k) == str(v), (lr, k, env.get(k))
    # The two variables trun adds for hang detection (docs/observability.md), where the user set neither.
    assert env.get("NCCL_RAS_ADDR", "").startswith("127.0.0.1:<free port"), (lr, env.get("NCCL_RAS_ADDR"))
    assert env.get("PYTHONFAULTHANDLER", "").startswith("1 "), (lr, env.get("PYTHONFAULTHANDLER"))
print("dry-run ok")
PY
echo "ok: --dry-run"
# --dry-run names the backend the agent would use (it said c10d for --rdzv-backend trun once).
for be in static c10d trun; do
  trun_run --dry-run --nnodes 2 --rdzv-backend "$be" --rdzv-endpoint 127.0.0.1:29400 --nproc-per-node 1 "$w" \
    >"$tmp/dry.$be" 2>&1 || fail "--dry-run --rdzv-backend $be: $(cat "$tmp/dry.$be")"
  grep -q "rendezvous: $be at 127.0.0.1:29400" "$tmp/dry.$be" || fail "--dry-run --rdzv-backend $be: $(grep rendezvous "$tmp/dry.$be")"
done
# The ranks are the rendezvous's to give: static knows them in advance, c10d and trun decide them when the nodes
# meet (the dry run once printed node_rank * nproc for them too).
grep -q "^  RANK=0$" "$tmp/dry.static" || fail "--dry-run static: RANK: $(grep RANK= "$tmp/dry.static")"
grep -q "^rendezvous store: this node serves it (node rank 0)" "$tmp/dry.static" ||
  fail "--dry-run static: who serves the store: $(grep 'rendezvous store' "$tmp/dry.static")"
for be in c10d trun; do
  grep -q "^  RANK=<decided at the rendezvous>$" "$tmp/dry.$be" || fail "--dry-run $be: RANK: $(grep RANK= "$tmp/dry.$be")"
  grep -q "^workers on this node: 1 (global ranks decided at the rendezvous of 2 nodes)" "$tmp/dry.$be" ||
    fail "--dry-run $be: $(grep 'workers on this node' "$tmp/dry.$be")"
done
grep -q "^  MASTER_ADDR=<decided at the rendezvous>$" "$tmp/dry.c10d" || fail "--dry-run c10d: $(grep MASTER_ADDR "$tmp/dry.c10d")"
grep -q "^  MASTER_PORT=29400$" "$tmp/dry.trun" || fail "--dry-run trun: $(grep MASTER_PORT "$tmp/dry.trun")"
trun_run --dry-run --standalone --rdzv-backend trun --nproc-per-node 1 "$w" >"$tmp/dry.sa" 2>&1 || fail "--dry-run --standalone"
grep -q "rendezvous: static (--standalone: trun's single-node rendezvous; torchrun's c10d) at" "$tmp/dry.sa" || fail "--dry-run --standalone: $(grep rendezvous "$tmp/dry.sa")"
echo "ok: --dry-run names the backend and the ranks it knows"

# PET_NPROC_PER_NODE: the fallback (3 workers run), and the command line wins over it (1 worker).
rc=0
PET_NPROC_PER_NODE=3 trun_run "$w" "$out" x >"$tmp/pet.out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "PET_NPROC_PER_NODE=3: exit $rc: $(cat "$tmp/pet.out")"
[ "$(ls "$out" | sort | tr '\n' ' ')" = "ran.0 ran.1 ran.2 " ] || fail "PET_NPROC_PER_NODE=3 ran: $(ls "$out")"
grep -q '"WORLD_SIZE": "3"' "$out/ran.2" || fail "PET_NPROC_PER_NODE=3: worker 2 saw $(cat "$out/ran.2")"
rm -f "$out"/*
rc=0
PET_NPROC_PER_NODE=3 trun_run --nproc-per-node 1 "$w" "$out" x >"$tmp/pet.out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "PET_NPROC_PER_NODE=3 --nproc-per-node 1: exit $rc: $(cat "$tmp/pet.out")"
[ "$(ls "$out")" = "ran.0" ] || fail "PET_NPROC_PER_NODE=3 --nproc-per-node 1 ran: $(ls "$out")"
grep -q '"WORLD_SIZE": "1"' "$out/ran.0" || fail "--nproc-per-node 1: worker saw $(cat "$out/ran.0")"
PET_NPROC_PER_NODE=3 trun_run --dry-run --nproc-per-node=2 "$w" "$out" >"$tmp/dry2" 2>&1 || fail "dry-run with PET_NPROC_PER_NODE failed"
[ "$(grep -c '^local rank' "$tmp/dry2")" -eq 2 ] || fail "--nproc-per-node=2 does not beat PET_NPROC_PER_NODE=3 in --dry-run"
echo "ok: PET_NPROC_PER_NODE"
# torch's built-in --event-log-handler and --logs-specs names keep working.
for elh in null console dynamic_rendezvous; do
  rm -f "$out"/*
  rc=0
  trun_run --event-log-handler "$elh" --logs-specs default "$w" "$out" x >"$tmp/names.out" 2>&1 || rc=$?
  [ $rc -eq 0 ] || fail "--event-log-handler $elh --logs-specs default: exit $rc: $(cat "$tmp/names.out")"
  [ "$(ls "$out")" = "ran.0" ] || fail "--event-log-handler $elh --logs-specs default ran: $(ls "$out")"
done
echo "ok: built-in --event-log-handler / --logs-specs names"
echo PASS
