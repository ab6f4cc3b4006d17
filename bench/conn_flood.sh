#!/usr/bin/env bash
# The connection flood of docs/store.md against `trun-store serve` in a cgroup of its own with a CPU quota
# (cgroup v1 cpu controller, else v2 cpu.max; created and removed here): bench/conn_flood.sh [QUOTA_PERCENT
# [N [TRUN_STORE]]] (defaults 5, 10000, build/trun-store). Prints the longest PING of an established
# connection while N idle connections from 127.0.0.2-5 open, then close at once, and the store's CPU time.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
pct=${1:-5}
n=${2:-10000}
store=${3:-$here/build/trun-store}
py=${PYTHON:-python3}
tmp=$(mktemp -d)
sp=""
cg=""
parent=""
cleanup() {
  [ -n "$sp" ] && kill "$sp" 2>/dev/null && wait "$sp" 2>/dev/null
  [ -n "$cg" ] && [ -d "$cg" ] && { rmdir "$cg" || echo "conn_flood: could not remove $cg" >&2; }
  rm -rf "$tmp"
}
trap cleanup EXIT
if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  parent=/sys/fs/cgroup/cpu
  cg=$parent/trun-bench-flood.$$
  mkdir "$cg" && echo 100000 >"$cg/cpu.cfs_period_us" && echo $((pct * 1000)) >"$cg/cpu.cfs_quota_us" ||
    { echo "conn_flood: cannot set up $cg" >&2; exit 1; }
elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  parent=/sys/fs/cgroup
  grep -qw cpu "$parent/cgroup.subtree_control" || echo +cpu >"$parent/cgroup.subtree_control"
  cg=$parent/trun-bench-flood.$$
  mkdir "$cg" && echo "$((pct * 1000)) 100000" >"$cg/cpu.max" || { echo "conn_flood: cannot set up $cg" >&2; exit 1; }
else
  echo "conn_flood: no cgroup cpu controller (v1 or v2)" >&2
  exit 1
fi
ulimit -n $((n + 1024)) 2>/dev/null || { echo "conn_flood: cannot raise the fd limit to $((n + 1024))" >&2; exit 1; }
"$store" serve --host 127.0.0.1 --port 0 --ready-file "$tmp/port" >"$tmp/store.log" 2>&1 &
sp=$!
echo "$sp" >"$cg/cgroup.procs" || { echo "conn_flood: cannot move the store into $cg" >&2; exit 1; }
for ((i = 0; i < 100; i++)); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || { cat "$tmp/store.log"; exit 1; }
c0=$(awk '{print $14 + $15}' "/proc/$sp/stat")
echo "store $store at $pct% of a CPU, $n connections"
"$py" "$here/bench/conn_flood.py" 127.0.0.1 "$(cat "$tmp/port")" "$n" 127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5
echo "store CPU: $(awk -v c0="$c0" -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15 - c0) / hz}' "/proc/$sp/stat") s"
kill "$sp"
wait "$sp" 2>/dev/null
sp=""
