#!/usr/bin/env bash
# The C client (trun-store cli) and load generator (trun-store bench) against torch's own TCPStore servers:
# torch 1.13 (host python, legacy wire numbering) and torch 2.6 (trixie chroot, classic server, VALIDATE+PING),
# with values cross-checked through torch's Python client in both directions, and bench against our own
# `trun-store serve`. Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail

repo=${TRUN_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${TRUN_BUILD:-$repo/build}
host_py=${TRUN_HOST_PY:-/usr/bin/python3}
chroot_dir=${TRUN_CHROOT:-/var/cache/trun/trixie}
bin=$build/trun-store
tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-30.XXXXXX")
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
skip() {
  echo "$*" >&2
  exit 77
}

[ -x "$bin" ] || fail "$bin is missing; run 'make' first"

# A torch TCPStore server on 127.0.0.1, port 0: prints its port, then lives until killed (at most 9 minutes).
# argv: [nolibuv]
server_py='
import sys, time, datetime
import torch.distributed as dist
kw = dict(timeout=datetime.timedelta(seconds=60), wait_for_workers=False)
if "nolibuv" in sys.argv[1:]:
    kw["use_libuv"] = False
s = dist.TCPStore("127.0.0.1", 0, 1, True, **kw)
print(s.port, flush=True)
time.sleep(540)
'

# torch's Python client. argv: port phase [nolibuv]. Prints "py-ok" when every assertion held.
client_py='
import sys, datetime
import torch, torch.distributed as dist
port, phase = int(sys.argv[1]), sys.argv[2]
kw = dict(timeout=datetime.timedelta(seconds=20))
if "nolibuv" in sys.argv[3:]:
    kw["use_libuv"] = False
c = dist.TCPStore("127.0.0.1", port, None, False, **kw)
def eq(what, got, want):
    if got != want:
        sys.exit("%s: got %r, want %r (torch %s)" % (what, got, want, torch.__version__))
if phase == "read":
    eq("get c/k1", c.get("c/k1"), b"from-c")
    eq("get c/sp", c.get("c/sp"), b"hello world")
    eq("add c/cnt 1", c.add("c/cnt", 1), 8)
    eq("compare_set c/k1", c.compare_set("c/k1", "from-c", "swapped"), b"swapped")
    c.set("py/k", "from-py")
    c.set("py/empty", "")
    eq("delete_key c/gone", c.delete_key("c/gone"), True)
elif phase == "read2":
    eq("get c/app", c.get("c/app"), b"12")
    eq("multi_get", c.multi_get(["c/m1", "c/m2"]), [b"x", b"y"])
    eq("check", c.check(["c/m1", "c/app"]), True)
    eq("check missing", c.check(["c/m1", "no/such"]), False)
    c.append("py/app", "a")
    c.append("py/app", "b")
    c.multi_set(["py/m1", "py/m2"], ["p", "q"])
elif phase == "wake":
    c.set("late", "woke")
elif phase == "wait":
    print("waiting", flush=True)
    c.wait(["fromc"], datetime.timedelta(seconds=20))
    eq("get fromc", c.get("fromc"), b"c-woke-me")
elif phase == "num_keys":
    print(c.num_keys())
    sys.exit(0)
print("py-ok", flush=True)
'

# Starts a server command in the background and sets $port from its first output line.
# argv: label cmd...
start_server() {
  local label=$1 out=$tmp/$1.port
  shift
  "$@" >"$out" 2>"$tmp/$label.err" &
  pids+=($!)
  local i
  for i in $(seq 1 300); do
    if [ -s "$out" ]; then
      port=$(head -n 1 "$out" | cut -d' ' -f1)
      echo "$label server on 127.0.0.1:$port"
      return 0
    fi
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$tmp/$label.err" >&2; fail "$label server exited before printing its port"; }
    sleep 0.2
  done
  cat "$tmp/$label.err" >&2
  fail "$label server printed no port within 60 s"
}

# Runs the C cli and compares its output lines (joined with '|') with want. argv: want cli-args...
expect_cli() {
  local want=$1 got
  shift
  got=$("$bin" cli --target "127.0.0.1:$port" --gen "$gen" --timeout-ms 20000 "$@" | paste -sd'|') ||
    fail "[$label] trun-store cli $* exited $?"
  [ "$got" = "$want" ] || fail "[$label] trun-store cli $*: got '$got', want '$want'"
  echo "[$label] cli $*: $got"
}

# Runs torch's Python client phase and expects "py-ok". argv: phase
expect_py() {
  local got
  got=$("${pyrun[@]}" -c "$client_py" "$port" "$1" "${pyextra[@]}" 2>"$tmp/py.err" | tail -n 1) || true
  [ "$got" = "py-ok" ] || { cat "$tmp/py.err" >&2; fail "[$label] torch client phase '$1': got '$got'"; }
  echo "[$label] torch client phase $1: ok"
}

# Checks one JSON line of trun-store bench: no errors and the requested count done. argv: json requests
check_bench() {
  "$host_py" -c '
import json, sys
r = json.loads(sys.argv[1])
for k in ("target", "gen", "clients", "requests", "seconds", "ops_per_sec", "p50_us", "p99_us", "p999_us", "max_us", "errors"):
    assert k in r, "missing " + k
assert r["errors"] == 0 and r["requests"] == int(sys.argv[2]), r
' "$1" "$2" || fail "[$label] bad bench result: $1"
}

run_bench() {
  local out
  out=$("$bin" bench --target "127.0.0.1:$port" --gen "$gen" "$@") || fail "[$label] trun-store bench $* exited $?"
  echo "[$label] bench $*: $out"
  local n
  n=$(printf '%s\n' "$@" | sed -n '/^--requests$/{n;p}')
  check_bench "$out" "$n"
}

# The checks every torch version gets. Uses $label $port $gen $pyrun $pyextra.
common_checks() {
  expect_cli "ok|ok|7|ok" set c/k1 from-c -- set c/sp "hello world" -- add c/cnt 7 -- set c/gone x
  expect_py read
  expect_cli "from-py|8|swapped|hello world||false" get py/k -- add c/cnt 0 -- get c/k1 -- get c/sp -- get py/empty \
    -- delete c/gone
  # A C waiter woken by torch's client.
  "$bin" cli --target "127.0.0.1:$port" --gen "$gen" --timeout-ms 20000 wait late -- get late >"$tmp/wait.out" &
  local w=$!
  pids+=($w)
  expect_py wake
  wait "$w" || fail "[$label] trun-store cli wait late exited $?"
  [ "$(paste -sd'|' "$tmp/wait.out")" = "ok|woke" ] || fail "[$label] C waiter: got '$(cat "$tmp/wait.out")'"
  echo "[$label] C waiter woken by the torch client: ok"
  # A torch waiter woken by the C client.
  "${pyrun[@]}" -c "$client_py" "$port" wait "${pyextra[@]}" >"$tmp/pywait.out" 2>"$tmp/pywait.err" &
  w=$!
  pids+=($w)
  local i
  for i in $(seq 1 150); do
    grep -q waiting "$tmp/pywait.out" 2>/dev/null && break
    sleep 0.2
  done
  expect_cli "ok" set fromc c-woke-me
  wait "$w" || { cat "$tmp/pywait.err" >&2; fail "[$label] torch waiter exited $?"; }
  [ "$(tail -n 1 "$tmp/pywait.out")" = "py-ok" ] || fail "[$label] torch waiter: $(cat "$tmp/pywait.out")"
  echo "[$label] torch waiter woken by the C client: ok"
  # A wait that times out leaves the C client in step (1.13: reconnect; 2.x: CANCEL_WAIT).
  local got
  got=$("$bin" cli --target "127.0.0.1:$port" --gen "$gen" --timeout-ms 300 wait never -- set never 1 -- get never \
    -- wait never -- add c/cnt 0 | paste -sd'|') || fail "[$label] wait timeout sequence exited $?"
  [ "$got" = "timeout|ok|1|ok|8" ] || fail "[$label] wait timeout sequence: got '$got'"
  echo "[$label] wait timeout then usable: $got"
  local nk
  nk=$("${pyrun[@]}" -c "$client_py" "$port" num_keys "${pyextra[@]}" 2>"$tmp/py.err") ||
    { cat "$tmp/py.err" >&2; fail "[$label] torch num_keys failed"; }
  expect_cli "$nk" num_keys
}

# ---- torch 1.13 on the host -------------------------------------------------------------------------
"$host_py" -c 'import torch.distributed' 2>/dev/null ||
  fail "no torch.distributed in $host_py (torch 1.13 expected: Debian python3-torch); run 'make deps'"
label=torch-$("$host_py" -c 'import torch; print(torch.__version__)')
gen=1.13
pyrun=("$host_py")
pyextra=()
start_server "$label" "$host_py" -c "$server_py"
common_checks
if "$bin" cli --target "127.0.0.1:$port" --gen v2 --timeout-ms 1500 ping >/dev/null 2>"$tmp/v2.err"; then
  fail "[$label] a v2 client was accepted by the 1.13 server"
fi
echo "[$label] v2 client refused by the 1.13 server (connect retried until its timeout): ok"
run_bench --clients 16 --requests 3000 --mix set=40,get=40,add=10,check=5,wait=5
run_bench --clients 256 --requests 2000

# ---- our server -------------------------------------------------------------------------------------
label=trun-serve
"$bin" serve --host 127.0.0.1 --port 0 --ready-file "$tmp/ready" >"$tmp/serve.out" 2>"$tmp/serve.err" &
pids+=($!)
for i in $(seq 1 100); do
  [ -s "$tmp/ready" ] && break
  kill -0 "${pids[-1]}" 2>/dev/null || { cat "$tmp/serve.err" >&2; fail "trun-store serve exited early"; }
  sleep 0.1
done
[ -s "$tmp/ready" ] || fail "trun-store serve wrote no --ready-file within 10 s"
port=$(cat "$tmp/ready")
echo "$label server on 127.0.0.1:$port"
gen=v2
run_bench --clients 16 --requests 3000 --mix set=30,get=30,add=10,check=10,wait=10,num_keys=5,ping=5
run_bench --clients 1024 --requests 4000
gen=1.13
run_bench --clients 16 --requests 2000

# ---- torch 2.6 in the chroot ------------------------------------------------------------------------
if [ "$(id -u)" != 0 ]; then skip "torch 1.13 part passed; the torch 2.6 part needs root for scripts/chroot-run.sh"; fi
for i in $(seq 1 ${TRUN_CHROOT_WAIT_S:-300}); do
  [ -f "$chroot_dir/.trun-ready" ] && break
  [ "$i" = 1 ] && echo "waiting for the test chroot at $chroot_dir (being built?)"
  sleep 1
done
[ -f "$chroot_dir/.trun-ready" ] ||
  fail "torch 1.13 part passed; no torch 2.6 chroot at $chroot_dir (run 'make deps' to build it)"
label=torch-2.6-chroot
gen=v2
pyrun=("$repo/scripts/chroot-run.sh" python3)
pyextra=(nolibuv)
start_server "$label" "${pyrun[@]}" -c "$server_py" nolibuv
common_checks
expect_cli "ok|ok|ok|ok" append c/app 1 -- append c/app 2 -- multi_set c/m1 x c/m2 y -- ping
expect_py read2
expect_cli "ab|p q|true|false" get py/app -- multi_get py/m1 py/m2 -- check py/m1 py/app -- check py/m1 nope
if "$bin" cli --target "127.0.0.1:$port" --gen 1.13 --timeout-ms 3000 set x 1 -- get x >/dev/null 2>"$tmp/l.err"; then
  fail "[$label] a 1.13 client was served by the 2.6 server"
fi
echo "[$label] 1.13 client refused by the 2.6 server: ok"
run_bench --clients 16 --requests 3000 --mix set=30,get=30,add=10,check=10,wait=10,num_keys=5,ping=5
echo "all checks passed"
