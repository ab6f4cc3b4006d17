#!/usr/bin/env bash
# What a user sees (issue 38): an option never swallows the next one ('--log_dir --dry-run' exits 2 like
# torchrun's "expected one argument", and nothing runs or is created); a script, an -m module, a
# --no-python program or a PYTHON_EXEC that does not exist exits 2 naming it before anything starts;
# --dry-run names the workers' interpreter and the rule that chose it; a worker that fails at start-up
# (No module named ...) is reported with the interpreter that ran it.
# Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
w=$repo/tests/helpers/touch.py
out=$tmp/ran
mkdir -p "$out" "$tmp/cwd"
cd "$tmp/cwd"

# bad NAME REGEX ARGS...: exit 2, exactly one stderr line matching REGEX, no worker ran, no file made here.
bad() {
  local name=$1 re=$2
  shift 2
  local rc=0
  trun_run "$@" >"$tmp/o" 2>"$tmp/e" || rc=$?
  echo "== $name: trun $* -> rc $rc: $(cat "$tmp/e")"
  [ $rc -eq 2 ] || fail "$name: exit $rc, want 2 (stderr: $(cat "$tmp/e"))"
  [ "$(wc -l <"$tmp/e")" -eq 1 ] || fail "$name: want exactly one stderr line, got:
$(cat "$tmp/e")"
  grep -Eq -- "$re" "$tmp/e" || fail "$name: the stderr line does not name the problem (/$re/): $(cat "$tmp/e")"
  [ -z "$(ls "$out")" ] || fail "$name: a worker ran: $(ls "$out")"
  [ -z "$(ls -A "$tmp/cwd")" ] || fail "$name: files were made in the working directory: $(ls -A "$tmp/cwd")"
}

# Item 3: the issue's command line, and the same value rule as torchrun's argparse on it.
bad swallow "argument --log-dir/--log_dir: expected one argument" --tee 3 --log_dir --dry-run "$w" "$out"
bad swallow-short "argument -r/--redirects: expected one argument" -r --nproc-per-node 2 "$w" "$out"
bad swallow-prefix "argument --role: expected one argument" --role --nnod 2 "$w" "$out"
rc=0
"$host_py" -m torch.distributed.run --tee 3 --log_dir --dry-run "$w" "$out" >/dev/null 2>"$tmp/e" || rc=$?
grep -q "argument --log_dir: expected one argument" "$tmp/e" || fail "torchrun 1.13 itself said: $(cat "$tmp/e")"
rm -rf "$tmp/cwd/--dry-run"
echo "ok: an option's value is never an option (torchrun exits $rc the same way)"

# Item 6: what does not exist is named before anything starts.
bad no-script "the training script 'nosuch\.py' in $tmp/cwd: No such file or directory" --nproc-per-node 2 nosuch.py
bad no-script-abs "the training script '/nonexistent/x\.py': No such file" /nonexistent/x.py
bad no-run-path "the training script '/nonexistent/x\.py'" --run-path /nonexistent/x.py
bad no-module "no module named 'nosuchpkg_38' \(-m nosuchpkg_38\.train\) for the workers' interpreter $host_py" \
  -m nosuchpkg_38.train
bad no-program "the training program 'nosuchprog_38' \(--no-python\) is not on PATH" --no-python nosuchprog_38
rc=0
PYTHON_EXEC=/nonexistent/python3 run_pg "$trun" "$w" "$out" >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc -eq 2 ] && grep -q "the workers' interpreter '/nonexistent/python3' (PYTHON_EXEC) is not an executable file" \
  "$tmp/e" || fail "a PYTHON_EXEC that does not exist: exit $rc: $(cat "$tmp/e")"
[ -z "$(ls "$out")" ] || fail "a worker ran with a PYTHON_EXEC that does not exist"
# what exists still runs: a script, an -m module found from the working directory, a --no-python program
printf 'import sys; open(sys.argv[1] + "/ran.m", "w").close()\n' >"$tmp/cwd/mymod_38.py"
trun_run -m mymod_38 "$out" >"$tmp/o" 2>&1 || fail "-m with a module of the working directory: $(cat "$tmp/o")"
[ -e "$out/ran.m" ] || fail "-m mymod_38 did not run"
trun_run --no-python true >"$tmp/o" 2>&1 || fail "--no-python true: $(cat "$tmp/o")"
trun_run --nproc-per-node 2 "$w" "$out" >"$tmp/o" 2>&1 || fail "a good script: $(cat "$tmp/o")"
[ -e "$out/ran.1" ] || fail "the good script did not run"
echo "ok: a missing script, module, program or interpreter exits 2 before anything starts"

# Item 5: the interpreter is named, with the rule that chose it.
trun_run --dry-run "$w" "$out" >"$tmp/dry" 2>&1 || fail "--dry-run: $(cat "$tmp/dry")"
grep -qx "interpreter: $host_py (PYTHON_EXEC)" "$tmp/dry" ||
  fail "--dry-run does not name PYTHON_EXEC's interpreter: $(grep -i interp "$tmp/dry")"
mkdir -p "$tmp/bin"
ln -s "$host_py" "$tmp/bin/python3"
env -u PYTHON_EXEC PATH="$tmp/bin:$PATH" "$trun" --dry-run "$w" "$out" >"$tmp/dry" 2>&1 || fail "--dry-run: $(cat "$tmp/dry")"
grep -qx "interpreter: $tmp/bin/python3 (the first python3 on PATH; set PYTHON_EXEC to choose another)" "$tmp/dry" ||
  fail "--dry-run does not name the python3 on PATH: $(grep -i interp "$tmp/dry")"
printf 'import no_such_module_38\n' >"$tmp/imp.py"
rc=0
trun_run --crash-loop 0 "$tmp/imp.py" >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc -eq 1 ] || fail "an import error: exit $rc, want 1"
grep -q "No module named 'no_such_module_38'; interpreter: $host_py (PYTHON_EXEC)" "$tmp/e" ||
  fail "the start-up failure does not name the interpreter: $(grep -i 'module' "$tmp/e")"
echo "ok: the workers' interpreter is named (--dry-run, a start-up failure)"

# Item 4: --standalone with more nodes asked for, and a --local-ranks-filter that hides every worker, exit 2.
# (-m ran mymod_38 through runpy, which caches its bytecode beside it unless PYTHONDONTWRITEBYTECODE is set)
rm -rf "$out"/ran.* "$tmp/cwd/mymod_38.py" "$tmp/cwd/__pycache__"
bad standalone-nnodes "--standalone runs one node, but --nnodes 2 asks for more" --standalone --nnodes 2 "$w" "$out"
bad filter-none "--local-ranks-filter names no local rank of this node's 2 workers \(0-1\)" \
  --local-ranks-filter 5 --nproc-per-node 2 "$w" "$out"
trun_run --dry-run --standalone "$w" "$out" >"$tmp/dry" 2>&1 || fail "--dry-run --standalone: $(cat "$tmp/dry")"
grep -q "rendezvous: static (--standalone: trun's single-node rendezvous; torchrun's c10d)" "$tmp/dry" ||
  fail "--dry-run --standalone does not say what it runs: $(grep rendezvous: "$tmp/dry")"
trun_run --local-ranks-filter 1,7 --nproc-per-node 2 "$w" "$out" >"$tmp/o" 2>"$tmp/e" ||
  fail "--local-ranks-filter 1,7: $(cat "$tmp/e")"
grep -q "local-ranks-filter names 1 local rank beyond this node's 2 workers (0-1)" "$tmp/e" ||
  fail "--local-ranks-filter 1,7 does not say that rank 7 does not exist: $(cat "$tmp/e")"
echo "ok: --standalone --nnodes 2 and an empty --local-ranks-filter exit 2"
# Item 9: console lines carry no source locations ("(agent_failures.c:248)") except at TRUN_LOG_LEVEL=debug, where
# they also carry the wall-clock time ("(agent_script.c:135 @1795894547.302386)").
! grep -E '\([a-z_]+\.c:[0-9]+( @[0-9.]+)?\)' "$tmp/e" || fail "a console line ends in a source location (above)"
TRUN_LOG_LEVEL=debug trun_run --local-ranks-filter 1,7 --nproc-per-node 2 "$w" "$out" >"$tmp/o" 2>"$tmp/e" ||
  fail "--local-ranks-filter 1,7 at debug level: $(cat "$tmp/e")"
grep -qE 'beyond this node.*\(agent_script\.c:[0-9]+ @[0-9]+\.[0-9]+\)$' "$tmp/e" ||
  fail "TRUN_LOG_LEVEL=debug lost the source locations: $(cat "$tmp/e")"
echo "ok: source locations only at TRUN_LOG_LEVEL=debug"

# Item 8: -r / --tee without --log-dir says once where the files go.
rm -f "$out"/ran.*
trun_run -r 3 --nproc-per-node 2 "$w" "$out" >"$tmp/o" 2>"$tmp/e" || fail "-r 3: $(cat "$tmp/e")"
[ "$(grep -c "the workers' --redirects / --tee logs go to $TMPDIR/torchelastic_" "$tmp/e")" -eq 1 ] ||
  fail "-r 3 without --log-dir does not say once where the logs go: $(cat "$tmp/e")"
d=$(sed -n "s|.*logs go to \(/[^ ]*\)/attempt_<N>/.*|\1|p" "$tmp/e")
[ -f "$d/attempt_0/1/stdout.log" ] || fail "the logs are not where it said: $d"
trun_run --tee 3 --log-dir "$tmp/logs" "$w" "$out" >"$tmp/o" 2>"$tmp/e" || fail "--tee 3 --log-dir: $(cat "$tmp/e")"
! grep -q "logs go to" "$tmp/e" || fail "with --log-dir the line is noise: $(cat "$tmp/e")"
trun_run "$w" "$out" >"$tmp/o" 2>"$tmp/e" || fail "a plain run: $(cat "$tmp/e")"
! grep -q "logs go to" "$tmp/e" || fail "without -r / --tee the line is noise: $(cat "$tmp/e")"
echo "ok: -r / --tee without --log-dir say where the logs go"

# Item 12: a rendezvous_start event carries no group rank (none is assigned yet); the round's end does.
trun_run --events "$tmp/ev.jsonl" "$w" "$out" >"$tmp/o" 2>&1 || fail "--events: $(cat "$tmp/o")"
"$host_py" - "$tmp/ev.jsonl" <<'PY' || fail "rendezvous events' group_rank (above)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
start = [e for e in ev if e.get("event", e.get("type")) == "rendezvous_start"]
end = [e for e in ev if e.get("event", e.get("type")) == "rendezvous_end"]
assert start and end, ev
assert all("group_rank" not in e for e in start), start
assert all(e.get("group_rank") == 0 for e in end), end
PY
# the config key table (config/README.md) lists every backend and only the implemented numa-binding value
"$host_py" - "$repo/config/README.md" <<'PY' || fail "config/README.md's key table (above)"
import sys
rows = {l.split("|")[1].strip(): l.split("|")[2] for l in open(sys.argv[1]) if l.startswith("| `")}
assert all("`%s`" % b in rows["`rdzv-backend`"] for b in ("static", "c10d", "trun")), rows["`rdzv-backend`"]
assert rows["`numa-binding`"].split("(")[0].strip() == "`node`", rows["`numa-binding`"]
PY
rm -f "$out"/ran.*
bad numa-socket "--numa-binding 'socket'" --numa-binding socket "$w" "$out"
echo "ok: events, the config key table"

# Item 7: a port held by a program that is not a store is named as such (not 600 s of "handshake failed:
# timed out"); an address this host cannot route (link-local without its interface) is retried like any
# unreachable master, and no message names trun-store's --target.
cat >"$tmp/silent.py" <<'PY'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
held = []
while True:  # accepts and never answers: not a TCPStore
    held.append(s.accept()[0])
PY
setsid "$host_py" "$tmp/silent.py" >"$tmp/silent.port" &
_bg_pgids+=("$!")
for _ in $(seq 100); do [ -s "$tmp/silent.port" ] && break; sleep 0.1; done
port=$(cat "$tmp/silent.port")
[ -n "$port" ] || fail "the silent listener did not start"
# agent_until FILE REGEX ARGS...: runs an agent in the background until its stderr (FILE) matches REGEX
# (safety limit 90 s), then stops it with SIGTERM; returns 1 if it ended or never said it.
agent_until() {
  local f=$1 re=$2 said=1
  shift 2
  PYTHON_EXEC=$host_py setsid "$trun" "$@" >/dev/null 2>"$f" &
  local pid=$!
  _bg_pgids+=("$pid")
  for _ in $(seq 900); do
    grep -Eq -- "$re" "$f" && { said=0; break; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null || said=1
  kill -TERM -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  return $said
}
agent_until "$tmp/e7" "something answers on that port but it is not a TCPStore" \
  --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" --no-python true ||
  fail "a port held by a silent program is not named as such: $(cat "$tmp/e7")"
agent_until "$tmp/e7b" "waiting [0-9]+ s" \
  --nnodes 2 --node-rank 1 --master-addr "[fe80::1]" --master-port 29555 --no-python true ||
  fail "an unroutable master was not retried: $(cat "$tmp/e7b")"
! grep -q -- "--target" "$tmp/e7" "$tmp/e7b" || fail "trun names trun-store's --target: $(cat "$tmp/e7b")"
echo "ok: a port held by another program, an unroutable master"
