#!/usr/bin/env bash
# `trun-topo hang` (agent/hang/ through the program) against tests/fakes/ras_server.py, the NCCL RAS stand-in
# that serves our 4 x H100 captures: the frozen mismatch is a hang naming rank 3 (pid 1024, GPU 3) and what
# ranks 0-2 wait in (exit 3), and so is the sleep hang and the bytes real NCCL 2.28.9 sent (rank 1, pid 669);
# equal frozen counts (spin) and advancing counts are no hang within --for (exit 0); an unresponsive rank is
# named as such; --once prints the ranks and their counts, --once --json the checked answer; malformed,
# lying, old-NCCL and non-RAS answers give one named line and exit 1 with --once, a closed port says that
# nothing listens; --fr reads the twelve flight-recorder dumps (rank 3 of mismatch last scheduled a broadcast);
# bad options exit 2. Only loopback traffic; the stand-in is killed on exit, even on failure.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=${TRUN_REPO:-$(cd "$here/../.." && pwd)}
build=${TRUN_BUILD:-$repo/build}
py=${TRUN_HOST_PY:-/usr/bin/python3}
topo=$build/trun-topo
fake=$repo/tests/fakes/ras_server.py
fx=$repo/tests/fixtures/hang
tmp=$(mktemp -d /tmp/trun-hang-test.XXXXXX)
server_pid=

stop_server() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
}
cleanup() {
  stop_server
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/o "$tmp"/e; do [ -f "$f" ] && sed 's/^/  | /' "$f" >&2; done
  exit 1
}

[ -x "$topo" ] || fail "$topo is missing; run 'make' first"
[ -x "$py" ] || fail "no $py to run the RAS stand-in (run 'make deps')"

# start MODE: the stand-in in MODE; sets addr.
start() {
  stop_server
  local pf=$tmp/port.$1
  "$py" "$fake" --mode "$1" --port-file "$pf" 2>"$tmp/server.$1.log" &
  server_pid=$!
  for _ in $(seq 400); do
    [ -s "$pf" ] && break
    kill -0 "$server_pid" 2>/dev/null || fail "the RAS stand-in ($1) exited at start: $(cat "$tmp/server.$1.log")"
    sleep 0.05
  done
  [ -s "$pf" ] || fail "the RAS stand-in ($1) wrote no port file within 20 s"
  addr=127.0.0.1:$(cat "$pf")
}

# hang WANT_RC ARGS...: trun-topo hang ARGS, stdout in $tmp/o, stderr in $tmp/e; the exit code must be WANT_RC.
hang() {
  local want=$1 rc=0
  shift
  "$topo" hang "$@" >"$tmp/o" 2>"$tmp/e" || rc=$?
  [ "$rc" = "$want" ] || fail "trun-topo hang $*: exit $rc, want $want"
}
has() { grep -qF -- "$2" "$tmp/$1" || fail "$1 lacks: $2"; }

# Hangs: named, exit 3.
start mismatch
hang 3 --ras-addr "$addr" --window 1 --interval 0.2
has o "trun-topo hang: HUNG: communicator 0x326111d269af5c41 (4 ranks): counts frozen for"
has o "rank 3 (pid 1024 on 192.0.2.2, GPU 3) launched Broadcast up to 1 (others 0), AllReduce up to 50 (others 51); 3 ranks wait in AllReduce 51"
[ "$(wc -l <"$tmp/o")" = 1 ] || fail "one line per hung communicator"
hang 0 --ras-addr "$addr" --once
has o "communicator 0x326111d269af5c41: 4 ranks, 4 answered, 0 missing"
has o "rank 3 pid 1024 on 192.0.2.2 GPU 3: Broadcast 1 AllReduce 50"
hang 0 --ras-addr "$addr" --once --json
"$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["communicators"][0]["ranks"][3]["pid"] == 1024' "$tmp/o" ||
  fail "--once --json is not the answer"
# NCCL_RAS_ADDR is where it asks by default.
NCCL_RAS_ADDR=$addr hang 0 --once
has o "rank 0 pid 1021"
start sleep
hang 3 --ras-addr "$addr" --window 1 --interval 0.2
has o "rank 3 (pid 907 on 192.0.2.2, GPU 3) launched AllReduce up to 50 (others 51); 3 ranks wait in AllReduce 51"
start wire
hang 3 --ras-addr "$addr" --window 1 --interval 0.2
has o "(2 ranks)"
has o "rank 1 (pid 669 on 192.0.2.2, GPU 1) launched AllReduce up to 20 (others 21); 1 rank wait in AllReduce 21"
start unresponsive
hang 3 --ras-addr "$addr" --window 1 --interval 0.2
has o "rank 3 (pid 907 on 192.0.2.2, GPU 3) missing from RAS (its process does not answer)"

# No hang: equal frozen counts and advancing counts, watched for 3 s with a 1 s window.
start spin
hang 0 --ras-addr "$addr" --window 1 --interval 0.2 --for 3
has o "trun-topo hang: no hang in"
grep -q HUNG "$tmp/o" && fail "spin named"
start advancing
hang 0 --ras-addr "$addr" --window 1 --interval 0.2 --for 3
grep -q HUNG "$tmp/o" && fail "advancing counts named"

# Answers that are not usable: one named line, exit 1 with --once; while watching, the same line once.
start malformed
hang 1 --ras-addr "$addr" --once
has e "NCCL RAS answer: not JSON"
hang 0 --ras-addr "$addr" --interval 0.2 --for 1.5
[ "$(grep -c "not JSON" "$tmp/e")" = 1 ] || fail "a repeated error is said once while watching"
start lying
hang 1 --ras-addr "$addr" --once
has e "\"rank\" = 9, outside 0..3"
start old
hang 1 --ras-addr "$addr" --once
has e "NCCL 2.28.7 or later is needed"
start notras
hang 1 --ras-addr "$addr" --once
has e "not a RAS server"
stop_server
hang 1 --ras-addr "$addr" --once
has e "NCCL RAS at $addr: nothing listens"

# Flight-recorder dumps.
hang 0 --fr "$fx"/flight-recorder/mismatch_rank_3 "$fx"/flight-recorder/sleep_rank_0
has o "mismatch_rank_3: format 2.10, NCCL 2.28.9, 51 entries"
has o "  last scheduled collective 51 (nccl:broadcast, group 0)"
has o "    #0 broadcast at "
has o "sleep_rank_0: format 2.10, NCCL 2.28.9, 51 entries"
has o "  last completed collective 50 (nccl:all_reduce, group 0)"
hang 0 --fr "$fx"/flight-recorder/*_rank_*
[ "$(grep -c ": format 2.10, NCCL 2.28.9, 5[01] entries" "$tmp/o")" = 12 ] || fail "twelve dumps"
printf 'not a pickle' >"$tmp/junk"
hang 2 --fr "$tmp/junk"
has e "trun-topo hang: flight-recorder dump: $tmp/junk: pickle: offset"

# Bad usage: exit 2, one line.
for args in "--window 0" "--window x" "--interval 0" "--for -1" "--json" "--bogus" "--fr" "--ras-addr nohostport --once"; do
  # shellcheck disable=SC2086
  hang 2 $args
  [ "$(wc -l <"$tmp/e")" = 1 ] || fail "trun-topo hang $args: want one stderr line"
done
hang 0 --help
has o "usage: trun-topo hang"
"$py" "$repo/tests/tools/man_options.py" "$repo/docs/man/trun-topo.1" "$tmp/o" >/dev/null ||
  fail "docs/man/trun-topo.1 lacks options that trun-topo hang --help lists"
echo "48-hang-ras: ok"
