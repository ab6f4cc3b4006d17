#!/usr/bin/env bash
# trun-store over IPv6 and IPv4: the default listener (:: dual-stack) takes ::1 and 127.0.0.1 clients, an
# explicit --host ::1 listener takes IPv6 only; the C client (cli) and torch 1.13's Python client both connect.
set -u
build=${TRUN_BUILD:-$(cd "$(dirname "$0")/../.." && pwd)/build}
py=${TRUN_HOST_PY:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/trun-26.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! ip -6 addr show dev lo 2>/dev/null | grep -q '::1'; then
  echo "no IPv6 loopback (::1) on this machine" >&2
  exit 77
fi

serve() { # $1 name, rest: extra serve options; sets PORT
  local name=$1
  shift
  "$build/trun-store" serve --port 0 --ready-file "$work/$name.port" "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$work/$name.port" ] && break; sleep 0.05; done
  PORT=$(cat "$work/$name.port") || fail "$name: trun-store did not start: $(cat "$work/$name.log")"
}

serve dual
out=$("$build/trun-store" cli --target "[::1]:$PORT" set k6 v6 -- get k6) || fail "cli over ::1: $out"
[ "$(echo "$out" | tail -n 1)" = v6 ] || fail "cli over ::1 read '$out', want v6"
out=$("$build/trun-store" cli --target "127.0.0.1:$PORT" get k6) || fail "cli over 127.0.0.1: $out"
[ "$out" = v6 ] || fail "cli over IPv4 read '$out', want v6 (one key space for both families)"
got=$("$py" -c "
import datetime, torch.distributed as d
s = d.TCPStore('::1', $PORT, None, False, timeout=datetime.timedelta(seconds=30))
s.set('py6', 'from-torch')
print(s.get('k6').decode())") || fail "torch 1.13 client over ::1 failed"
[ "$got" = v6 ] || fail "torch over ::1 read '$got', want v6"
out=$("$build/trun-store" cli --target "[::1]:$PORT" get py6) || fail "cli get py6: $out"
[ "$out" = from-torch ] || fail "cli read '$out', want from-torch"

serve v6only --host ::1
"$build/trun-store" cli --target "[::1]:$PORT" set a b >/dev/null || fail "--host ::1: IPv6 client refused"
if "$build/trun-store" cli --timeout-ms 500 --target "127.0.0.1:$PORT" get a >/dev/null 2>&1; then
  fail "--host ::1 accepted an IPv4 client"
fi
echo PASS
