#!/usr/bin/env bash
# runner: alone
# 2000 connections waiting on one key in one trun-store (tests/store/many_conns.py, plain sockets, no torch):
# half torch >= 2.2 style (VALIDATE + PING handshake, WAIT = 0x06), half torch 1.13 style (no handshake,
# WAIT = 0x05). The server's RSS is printed with 0 and with 2000 connections; one SET of "/release" must send
# the single byte 0x00 to every one of them; after they all close the server must still answer. Twice: one
# loop, then --threads 4 (the connections on four loops, one SET waking waiters of every thread).
set -u
TRUN_REPO=${TRUN_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
TRUN_BUILD=${TRUN_BUILD:-$TRUN_REPO/build}
TRUN_HOST_PY=${TRUN_HOST_PY:-/usr/bin/python3}
STORE=$TRUN_BUILD/trun-store
N=${TRUN_STORE_CONNS:-2000}

[ -x "$STORE" ] || { echo "no $STORE: run make first" >&2; exit 1; }
# The server and the client each need N+ descriptors: raise the soft limit (inherited by both).
need=$((N + 200))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $need ]; then
  ulimit -n $need 2>/dev/null || { echo "cannot raise RLIMIT_NOFILE to $need (hard limit $(ulimit -Hn))" >&2; exit 77; }
fi
echo "# RLIMIT_NOFILE soft $(ulimit -n) hard $(ulimit -Hn); somaxconn $(cat /proc/sys/net/core/somaxconn)"

work=$(mktemp -d "${TMPDIR:-/tmp}/trun-25.XXXXXX")
. "$TRUN_REPO/tests/store/serve_lib.sh"
trap 'store_cleanup; rm -rf "$work"' EXIT

# run_once THREADS: the whole check against trun-store --threads THREADS.
run_once() {
  store_start --threads "$1"
  echo "# trun-store --threads $1: pid $store_pid port $PORT"

  timeout --kill-after=5 300 "$TRUN_HOST_PY" "$TRUN_REPO/tests/store/many_conns.py" 127.0.0.1 "$PORT" "$store_pid" "$N"
  rc=$?
  echo "== trun-store log"
  sed 's/^/   /' "$work/store.log"
  if ! kill -0 $store_pid 2>/dev/null; then
    echo "FAIL: trun-store is gone"
    exit 1
  fi
  # A clean stop on SIGTERM (exit 0, documented in tools/store_serve.c) after the load.
  store_stop
  [ $rc -eq 77 ] && { echo "many_conns.py could not get enough file descriptors" >&2; exit 77; }
  [ $rc -eq 0 ] || { echo "FAIL: many_conns.py exit $rc"; exit 1; }
}

for threads in 1 4; do
  run_once $threads
done
echo "passed"
