#!/usr/bin/env bash
# --warm-start: a worker started from the pool of pre-started interpreters cannot tell it from a cold start.
# Each case runs once cold and once with --warm-start and compares (tests/helpers/warmdump.py, warmdiff.py):
#  - the shape of the start, per local rank (os.environ and the C environment, argv, sys.orig_argv, sys.path,
#    __name__, __file__, __main__'s keys and loader, cwd, stdin, stdout's kind, every signal's disposition and
#    the blocked mask, session / group leadership, CPU affinity, sys.flags, stdio buffering, sys.modules with
#    each module's file) for a script, for
#    -m module and for --run-path; torch 1.13 (host) and torch 2.6 (the trixie chroot, through a PYTHON_EXEC
#    wrapper that execs the chroot's python3); CUDA never initialised by the pool;
#  - an uncaught exception: exit code 1 in the report and the same traceback on stderr;
#  - sys.exit(3): exit code 3 in the report; an uncaught KeyboardInterrupt: the same end by SIGINT;
#  - a torchelastic @record main: the same error file (message and call stack) and the report shows it;
#  - the pool imports with the worker's sys.path[0] and sys.argv (a warm module beside the script is found
#    and sees the worker's argv);
#  - the pool is isolated from the agent's cwd (issue 41): modules planted there under the names the
#    bootstrap and torch import (socket, _socket, array, signal, importlib, runpy, selectors, enum, ...) are
#    never imported, warm as cold, and the worker still imports its own module from the script's directory
#    (the shapes, sys.modules included, are the same);
#  - --no-python with --warm-start starts cold and says why; --dry-run / --explain say warm or cold, and
#    --explain gives a pool process's memory.
# The warm run must really be warm: each worker prints whether torch was imported before its first line.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
need_chroot
dump=$repo/tests/helpers/warmdump.py

# run NAME MODE(cold|warm) WANT_RC PYTHON DIR trun-args...: trun run in DIR with PYTHON_EXEC=PYTHON, its
# workers' logs under $tmp/NAME.MODE.logs, their outputs in $tmp/NAME.MODE.out; output in $tmp/NAME.MODE.{out,err}.
run() {
  local name=$1 mode=$2 want=$3 py=$4 dir=$5
  shift 5
  local warm=()
  [ "$mode" = warm ] && warm=(--warm-start)
  mkdir -p "$tmp/$name.$mode.dir"
  echo "== $name ($mode): trun ${warm[*]} $*"
  local rc=0
  (cd "$dir" && PYTHON_EXEC=$py run_pg "$trun" "${warm[@]}" --log-dir "$tmp/$name.$mode.logs" --redirects 3 "$@") \
    >"$tmp/$name.$mode.out" 2>"$tmp/$name.$mode.err" || rc=$?
  sed 's/^/    err| /' "$tmp/$name.$mode.err" | grep -v '^    err| \*\*\*\|OMP_NUM_THREADS' || true
  [ $rc -eq "$want" ] || fail "$name ($mode): trun exited $rc, want $want"
  local f
  for f in "$tmp/$name.$mode.logs"/*/attempt_0/*/stdout.log; do
    [ -f "$f" ] || fail "$name ($mode): no worker stdout.log under $tmp/$name.$mode.logs"
    local want_pre=False
    [ "$mode" = warm ] && want_pre=True
    head -1 "$f" | grep -qx "preloaded=$want_pre" ||
      fail "$name ($mode): $f begins '$(head -1 "$f")', want preloaded=$want_pre (warm: torch already imported)"
  done
}
logdir() { echo "$tmp/$1.$2.logs/"*/; }

# shape NAME PYTHON DIR NPROC trun-args-before-the-script... -- script-and-args: cold and warm, compared.
shape() {
  local name=$1 py=$2 dir=$3 n=$4
  shift 4
  run "$name" cold 0 "$py" "$dir" --standalone --nproc-per-node "$n" "${@/@OUT@/$tmp/$name.cold.dir}"
  run "$name" warm 0 "$py" "$dir" --standalone --nproc-per-node "$n" "${@/@OUT@/$tmp/$name.warm.dir}"
  "$host_py" "$repo/tests/helpers/warmdiff.py" "$name" "$tmp/$name.cold.dir" "$tmp/$name.warm.dir" "$n" \
    "$(logdir "$name" cold)" "$(logdir "$name" warm)" || fail "$name: a warm start differs from a cold one (above)"
  grep -q '"cuda_initialized": false' "$tmp/$name.warm.dir/shape.0.json" || fail "$name: CUDA was initialised"
}

# torch 1.13: a script, -m module (run in the module's directory: sys.path[0] is the cwd), --run-path.
shape script113 "$host_py" /tmp 2 "$dump" @OUT@ dump
shape module113 "$host_py" "$repo/tests/helpers" 2 -m warmdump @OUT@ dump
shape runpath113 "$host_py" /tmp 2 --run-path "$dump" @OUT@ dump

# The agent's cwd holds modules named as what the bootstrap and torch import, and a warmlocal.py that the
# script imports from its own directory: a cold worker never sees the cwd (sys.path[0] is the script's
# directory), nor may a warm one. Each planted module says so in planted.log and fails.
plant=$tmp/plant
mkdir -p "$plant" "$tmp/sdir"
for m in socket _socket array signal _signal importlib runpy selectors enum select struct os warmlocal; do
  printf 'open("%s/planted.log", "a").write("%s.py imported from the agent'"'"'s cwd\n")\nraise ImportError("planted")\n' \
    "$tmp" "$m" >"$plant/$m.py"
done
cp "$dump" "$tmp/sdir/warmdump.py"
printf 'WHERE = __file__\n' >"$tmp/sdir/warmlocal.py"
shape planted113 "$host_py" "$plant" 2 "$tmp/sdir/warmdump.py" @OUT@ dumplocal
[ ! -e "$tmp/planted.log" ] || fail "planted: a worker imported from the agent's cwd: $(sort -u "$tmp/planted.log" | xargs)"
grep -q "\"warmlocal\": \"$tmp/sdir/warmlocal.py\"" "$tmp/planted113.warm.dir/shape.0.json" ||
  fail "planted: the warm worker did not import warmlocal from the script's directory"

# torch 2.6: the chroot's python3 behind a PYTHON_EXEC wrapper (exec all the way: the pid stays the pool's).
py26=$tmp/python26
printf '#!/bin/sh\nexec %q --keep-env python3 "$@"\n' "$repo/scripts/chroot-run.sh" >"$py26"
chmod +x "$py26"
cp "$dump" "$tmp/warmdump.py" # /tmp is the same inside the chroot
shape script26 "$py26" /tmp 2 "$tmp/warmdump.py" @OUT@ dump

# An uncaught exception: exit code 1, the same traceback.
for py in "$host_py" "$py26"; do
  name=raise113
  [ "$py" = "$py26" ] && name=raise26
  for mode in cold warm; do
    run $name $mode 1 "$py" /tmp --standalone --nproc-per-node 1 "$tmp/warmdump.py" "$tmp" raise
    grep -Eq 'exitcode +: 1 ' "$tmp/$name.$mode.err" || fail "$name ($mode): the report does not say exit code 1"
  done
  diff <(cat "$(logdir $name cold)"attempt_0/0/stderr.log) <(cat "$(logdir $name warm)"attempt_0/0/stderr.log) ||
    fail "$name: the traceback of a warm worker differs from a cold one's (above)"
  grep -q 'RuntimeError: boom from rank 0' "$(logdir $name warm)"attempt_0/0/stderr.log ||
    fail "$name: no traceback in the warm worker's stderr.log"
done

# sys.exit(3): exit code 3.
for mode in cold warm; do
  run exit3 $mode 1 "$host_py" /tmp --standalone --nproc-per-node 1 "$dump" "$tmp" exit3
  grep -Eq 'exitcode +: 3 ' "$tmp/exit3.$mode.err" || fail "exit3 ($mode): the report does not say exit code 3"
done

# An uncaught KeyboardInterrupt: python ends by SIGINT; the same report and traceback.
for mode in cold warm; do
  run kbint $mode 1 "$host_py" /tmp --standalone --nproc-per-node 1 "$dump" "$tmp" kbint
  grep -E 'exitcode +: ' "$tmp/kbint.$mode.err" | sed 's/pid: [0-9]*/pid: N/' >"$tmp/kbint.$mode.code"
  [ -s "$tmp/kbint.$mode.code" ] || fail "kbint ($mode): no exit code in the report"
done
diff "$tmp/kbint.cold.code" "$tmp/kbint.warm.code" || fail "kbint: the report's exit code differs (above)"
grep -q ': -2 ' "$tmp/kbint.warm.code" || fail "kbint: the warm worker did not end by SIGINT: $(cat "$tmp/kbint.warm.code")"
diff "$(logdir kbint cold)"attempt_0/0/stderr.log "$(logdir kbint warm)"attempt_0/0/stderr.log ||
  fail "kbint: the traceback differs (above)"

# @record: the same error file, shown by the report.
for mode in cold warm; do
  run record $mode 1 "$host_py" /tmp --standalone --nproc-per-node 1 "$dump" "$tmp" record
  grep -q 'ValueError: recorded failure' "$tmp/record.$mode.err" ||
    fail "record ($mode): the report does not carry the error file's message"
done
"$host_py" - "$(logdir record cold)attempt_0/0/error.json" "$(logdir record warm)attempt_0/0/error.json" <<'PY' ||
import json, sys
c, w = (json.load(open(p))["message"] for p in sys.argv[1:3])
for m in (c, w):
    m["extraInfo"].pop("timestamp", None)
if c != w:
    print("cold error file:", json.dumps(c, indent=1))
    print("warm error file:", json.dumps(w, indent=1))
    sys.exit(1)
print("record: the error files are the same:", c["message"])
PY
  fail "record: the warm worker's error file differs from the cold one's"

# --no-python: cold, with the reason.
echo "== no-python: trun --warm-start --no-python"
PYTHON_EXEC=$host_py run_pg "$trun" --warm-start --standalone --nproc-per-node 1 --no-python /bin/true \
  >"$tmp/nopy.out" 2>"$tmp/nopy.err" || fail "no-python: trun exited $?, want 0"
grep -q 'local rank 0 starts cold: --no-python' "$tmp/nopy.err" || {
  cat "$tmp/nopy.err"
  fail "no-python: no line saying local rank 0 starts cold because of --no-python"
}
# The pool imports with the worker's sys.path[0] (the script's directory), as the cold worker's imports do:
# a warm module that lives beside the script is found there (run from /tmp, not the script's directory).
mkdir -p "$tmp/beside"
printf 'import sys\nWHERE = __file__\nARGV = list(sys.argv)\n' >"$tmp/beside/warmbeside.py"
printf 'import sys\nprint("preloaded=%%s" %% ("warmbeside" in sys.modules))\nimport warmbeside\nprint(warmbeside.WHERE)\nprint("argv at import %%s" %% ("same" if warmbeside.ARGV == sys.argv else warmbeside.ARGV))\n' \
  >"$tmp/beside/main.py"
echo "== beside: trun --warm-start --warm-start-modules warmbeside $tmp/beside/main.py"
(cd /tmp && PYTHON_EXEC=$host_py run_pg "$trun" --warm-start --warm-start-modules warmbeside --standalone \
  --nproc-per-node 1 "$tmp/beside/main.py" --lr 0.1) >"$tmp/beside.out" 2>"$tmp/beside.err" || {
  cat "$tmp/beside.err"
  fail "beside: trun exited $?"
}
grep -qx "preloaded=True" "$tmp/beside.out" && grep -qx "$tmp/beside/warmbeside.py" "$tmp/beside.out" &&
  grep -qx "argv at import same" "$tmp/beside.out" || {
  cat "$tmp/beside.out" "$tmp/beside.err"
  fail "beside: the pool did not import warmbeside from the script's directory with the worker's sys.argv"
}

# --dry-run and --explain say whether the workers start warm; --explain measures a pool process's memory.
PYTHON_EXEC=$host_py "$trun" --dry-run --warm-start --standalone --nproc-per-node 2 "$dump" >"$tmp/dry.out" ||
  fail "--dry-run --warm-start exited $?"
grep -q "^warm start: on: each of the 2 workers starts from a pool process ($host_py -u, importing torch,torch.distributed)" \
  "$tmp/dry.out" || fail "--dry-run does not say the workers start warm: $(tail -2 "$tmp/dry.out")"
grep -q "^warm start: on, but every worker starts cold: --no-python" <<<"$("$trun" --dry-run --warm-start --no-python --standalone /bin/true)" ||
  fail "--dry-run --no-python does not say the workers start cold"
grep -q "^warm start: off" <<<"$("$trun" --dry-run --standalone "$dump")" || fail "--dry-run does not say warm start is off"
PYTHON_EXEC=$host_py run_pg "$trun" --explain --warm-start --nproc-per-node 2 >"$tmp/explain.out" ||
  fail "--explain --warm-start exited $?"
grep -Eq "^  pool memory: [0-9]+ MiB resident per pool process .*, [0-9]+ MiB for this node's 2$" "$tmp/explain.out" ||
  fail "--explain does not give the pool's memory: $(tail -2 "$tmp/explain.out")"
grep "pool memory" "$tmp/explain.out"
echo PASS
