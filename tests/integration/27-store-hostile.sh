#!/usr/bin/env bash
# runner: alone
# Hostile clients against a real trun-store serve (tests/store/hostile.py, plain sockets, no torch), with one
# loop and with --threads 4: a client that never reads a MULTI_GET whose reply would be 400 MiB (the server's
# RSS must stay within RSS_BOUND_MB of where it was: the reply cap closes it), 400 pipelined GETs of 1 MiB
# never read (held, RSS bounded, then all read back in order), a CHECK of 65,536 empty keys trickled 16 keys
# a write (the answer; the server's CPU seconds are printed, not asserted), 30 clients that reset
# mid-reply (20 of them waiting on a key), 200 clients at once. After each case the server must still be
# running and answering; at the end SIGTERM stops it with exit 0. A bad value of a limit option exits 2.
# Fails on the tree before issue 28's fixes (400 MB RSS).
set -u
TRUN_REPO=${TRUN_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
TRUN_BUILD=${TRUN_BUILD:-$TRUN_REPO/build}
TRUN_HOST_PY=${TRUN_HOST_PY:-/usr/bin/python3}
STORE=$TRUN_BUILD/trun-store
[ -x "$STORE" ] || { echo "no $STORE: run make first" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/trun-27.XXXXXX")
. "$TRUN_REPO/tests/store/serve_lib.sh"
trap 'store_cleanup; rm -rf "$work"' EXIT

# The limits' options: a bad value exits 2 naming the option.
for opt in --max-conns --max-conns-per-peer --max-conn-memory --max-input-bytes --max-reply-bytes \
  --max-wait-bytes --max-wait-bytes-total; do
  "$STORE" serve --port 0 "$opt" 12x >/dev/null 2>"$work/err"
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "$opt" "$work/err" || { cat "$work/err"; echo "FAIL: serve $opt 12x: exit $rc"; exit 1; }
done

for threads in 1 4; do
  store_start --threads "$threads"
  echo "# trun-store --threads $threads: pid $store_pid port $PORT"
  for c in multiget pipeline "trickle 65536" resets many; do
    read -r name arg <<<"$c"
    timeout --kill-after=5 300 "$TRUN_HOST_PY" "$TRUN_REPO/tests/store/hostile.py" "$name" 127.0.0.1 "$PORT" \
      "$store_pid" ${arg:+"$arg"} 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "== trun-store log"; sed 's/^/   /' "$work/store.log"
      echo "FAIL: case '$c' (exit $rc)"
      exit 1
    fi
    kill -0 $store_pid 2>/dev/null || { sed 's/^/   /' "$work/store.log"; echo "FAIL: trun-store is gone after '$c'"; exit 1; }
  done
  grep -q "reply over the reply limit" "$work/store.log" || { sed 's/^/   /' "$work/store.log"; echo "FAIL: the reply cap was not logged"; exit 1; }
  store_stop
done
echo "passed"
