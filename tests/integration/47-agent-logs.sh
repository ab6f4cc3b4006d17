#!/usr/bin/env bash
# Worker output handling (tests/helpers/chatty.py workers, host python, no torch needed):
#  - --log-dir D --redirects 3: D/<run_id>_*/attempt_0/<lr>/{stdout,stderr}.log hold each worker's lines and
#    nothing of theirs reaches the console;
#  - --tee 3: the files AND the console, console lines prefixed "[default0]:" / "[default1]:";
#  - --local-ranks-filter 0 (with --tee 3, and alone): only local rank 0 on the console (files keep both);
#  - --role trainer: the prefix becomes "[trainer0]:";
#  - 4 workers writing long lines concurrently, each line in 3 flushed pieces: every console line arrives
#    whole and in order (tests/helpers/checklines.py), with --tee 3 (prefixed) and without (plain).
# Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
w=$repo/tests/helpers/chatty.py
N=5

# run NAME trun-args...: must exit 0; console in $tmp/NAME.{out,err}.
run() {
  local name=$1
  shift
  echo "== $name: trun $*"
  local rc=0
  trun_run "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  [ $rc -eq 0 ] || fail "$name: trun exited $rc: $(cat "$tmp/$name.err")"
}

# worker_lines STREAM LR: what chatty.py lines writes (stdout also ends with the runid line, checked apart).
worker_lines() {
  local i
  for ((i = 0; i < N; i++)); do echo "$1 $2 line $i"; done
}

# check_files NAME DIR NPROC: exactly one run dir DIR/<run_id>_*, named after the workers' run id, whose
# attempt_0/<lr>/ files hold exactly each worker's lines.
check_files() {
  local name=$1 dir=$2 nproc=$3 runs run lr
  runs=$(ls "$dir")
  [ "$(wc -w <<<"$runs")" -eq 1 ] || fail "$name: want one run dir in $dir, got: $runs"
  run=$dir/$runs
  for ((lr = 0; lr < nproc; lr++)); do
    local d=$run/attempt_0/$lr
    [ -f "$d/stdout.log" ] && [ -f "$d/stderr.log" ] || fail "$name: missing $d/stdout.log or stderr.log: $(ls -R "$run")"
    diff <(worker_lines out $lr) <(grep -v '^runid ' "$d/stdout.log") >/dev/null ||
      fail "$name: $d/stdout.log holds: $(cat "$d/stdout.log")"
    diff <(worker_lines err $lr) "$d/stderr.log" >/dev/null || fail "$name: $d/stderr.log holds: $(cat "$d/stderr.log")"
    local id
    id=$(sed -n 's/^runid //p' "$d/stdout.log")
    [ -n "$id" ] || fail "$name: no runid line in $d/stdout.log"
    case "$runs" in "${id}_"?*) ;; *) fail "$name: run dir '$runs' is not '<run_id>_*' for run id '$id'" ;; esac
  done
  echo "ok: $name files under $run"
}

# console_has NAME STREAM(out|err) LR PREFIX: the console stream holds PREFIX + each line of local rank LR,
# in order. console_lacks NAME STREAM LR: no line of local rank LR at all.
console_has() {
  local name=$1 s=$2 lr=$3 pre=$4
  diff <(worker_lines "$s" "$lr" | sed "s/^/$pre/") <(grep -F -- "$s $lr line " "$tmp/$name.$s") >/dev/null ||
    fail "$name: console $s lacks rank $lr's lines with prefix '$pre'; it has:
$(cat "$tmp/$name.$s")"
}
console_lacks() {
  local name=$1 s=$2 lr=$3
  if grep -qF -- "$s $lr line " "$tmp/$name.$s"; then
    fail "$name: console $s shows rank $lr's lines: $(grep -F -- "$s $lr line " "$tmp/$name.$s")"
  fi
}
# Only trun's own lines may be on a console when every worker stream is redirected.
only_trun_lines() {
  local f=$1
  if grep -vE '^(\*+|Setting OMP_NUM_THREADS .*|trun: .*)$' "$f" | grep -q .; then
    fail "worker output reached the console ($f): $(cat "$f")"
  fi
}

# 1. --redirects 3 into --log-dir: files only.
run redirect --log-dir "$tmp/logs1" --redirects 3 --nproc-per-node 2 "$w" lines $N
check_files redirect "$tmp/logs1" 2
only_trun_lines "$tmp/redirect.out"
only_trun_lines "$tmp/redirect.err"
echo "ok: redirect: nothing on the console"

# 2. --tee 3: files and prefixed console lines.
run tee --log-dir "$tmp/logs2" --tee 3 --nproc-per-node 2 "$w" lines $N
check_files tee "$tmp/logs2" 2
for lr in 0 1; do
  console_has tee out $lr "\\[default$lr\\]:"
  console_has tee err $lr "\\[default$lr\\]:"
done
grep -q "^\[default0\]:out 0 line 0$" "$tmp/tee.out" || fail "tee: no '[default0]:out 0 line 0' line"
grep -q "^\[default1\]:err 1 line 0$" "$tmp/tee.err" || fail "tee: no '[default1]:err 1 line 0' line"
echo "ok: tee"

# 3. --local-ranks-filter 0, with --tee 3: the console shows rank 0 only, the files keep both.
run filter-tee --log-dir "$tmp/logs3" --tee 3 --local-ranks-filter 0 --nproc-per-node 2 "$w" lines $N
check_files filter-tee "$tmp/logs3" 2
console_has filter-tee out 0 "\\[default0\\]:"
console_has filter-tee err 0 "\\[default0\\]:"
console_lacks filter-tee out 1
console_lacks filter-tee err 1
# ... and alone (streams not redirected): rank 0 plain on the console, rank 1 nowhere.
run filter --local-ranks-filter 0 --nproc-per-node 2 "$w" lines $N
console_has filter out 0 ""
console_has filter err 0 ""
console_lacks filter out 1
console_lacks filter err 1
echo "ok: --local-ranks-filter"

# 4. --role trainer: "[trainer<lr>]:".
run role --log-dir "$tmp/logs4" --tee 3 --role trainer --nproc-per-node 2 "$w" lines $N
for lr in 0 1; do
  console_has role out $lr "\\[trainer$lr\\]:"
  console_has role err $lr "\\[trainer$lr\\]:"
done
echo "ok: --role"

# 5. Concurrent long lines written in pieces: whole lines on the console, tee'd and plain.
S=400
run storm-tee --log-dir "$tmp/logs5" --tee 3 --nproc-per-node 4 "$w" storm $S
"$host_py" "$repo/tests/helpers/checklines.py" "$tmp/storm-tee.out" O 4 $S '[default{lr}]:' || fail "storm-tee: stdout lines cut or mixed"
"$host_py" "$repo/tests/helpers/checklines.py" "$tmp/storm-tee.err" E 4 $S '[default{lr}]:' || fail "storm-tee: stderr lines cut or mixed"
for lr in 0 1 2 3; do
  [ "$(grep -c '^STORM O' "$tmp/logs5/"*/attempt_0/$lr/stdout.log)" -eq $S ] || fail "storm-tee: rank $lr's stdout.log is incomplete"
done
run storm-plain --nproc-per-node 4 "$w" storm $S
"$host_py" "$repo/tests/helpers/checklines.py" "$tmp/storm-plain.out" O 4 $S '' || fail "storm-plain: stdout lines cut or mixed"
"$host_py" "$repo/tests/helpers/checklines.py" "$tmp/storm-plain.err" E 4 $S '' || fail "storm-plain: stderr lines cut or mixed"
echo "ok: storm"
echo PASS
