#!/usr/bin/env bash
# runner: alone
# Rendezvous at scale on loopback (issue 4): 1,000 agents (one thread and one store connection each, in
# build/trun-rdzv-bench) complete the `trun` rendezvous on a trun-store, and 128 agents torchelastic's c10d
# rendezvous; every agent must get a distinct group rank 0..n-1 and the same world size (the tool checks and
# exits 1 otherwise). A second `trun` rendezvous of 1,000 with MIN 600 (a range: committed by the 1,000th).
set -u
. "$(dirname "$0")/../helpers/lib.sh"
[ -x "$build/trun-rdzv-bench" ] || fail "$build/trun-rdzv-bench is missing; run 'make' first"
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge 2100 ] || skip "cannot open 2,100 files here (ulimit -n $(ulimit -n))"
"$build/trun-store" serve --port 0 --ready-file "$tmp/port" >"$tmp/store.log" 2>&1 &
srv=$!
_bg_pgids+=("$srv")
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
port=$(cat "$tmp/port") || fail "trun-store did not start: $(cat "$tmp/store.log")"
run() {
  local out
  out=$("$build/trun-rdzv-bench" --target "127.0.0.1:$port" "$@" 2>&1) || fail "trun-rdzv-bench $*: $out"
  echo "$out"
}
run --agents 1000 --mode trun --run-id fast1000
run --agents 1000 --min 600 --mode trun --run-id fast1000r
run --agents 128 --mode c10d --run-id c10d128
kill "$srv"
echo "PASS: 1,000 agents (trun), 1,000 with a range, 128 agents (c10d) got distinct ranks"
