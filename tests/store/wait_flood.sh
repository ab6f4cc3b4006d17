#!/usr/bin/env bash
# Runs every case of tests/store/wait_flood.py (issue 41, finding 1) against a fresh `trun-store serve` each:
#   tests/store/wait_flood.sh [TRUN_STORE_BINARY]   (default: build/trun-store)
# Prints the probe's '# ...' figures: server CPU per WAIT + CANCEL_WAIT pair, RSS per waiting connection,
# PING p50 / max under 4 and 16 flooding connections; each with WAIT on 131,072 fresh keys (the protocol's
# maximum) and on 3,000 (within the default wait budget of one connection). A probe, not a test: nothing
# is asserted. Run it on a build of the old tree and of the new one to compare them.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
STORE=${1:-$repo/build/trun-store}
PY=${TRUN_HOST_PY:-/usr/bin/python3}
probe=$repo/tests/store/wait_flood.py
[ -x "$STORE" ] || { echo "no $STORE: run make first" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/trun-wait-flood.XXXXXX")
pid=""
stop() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=""; }
trap 'stop; rm -rf "$work"' EXIT

# run CASE ARGS...: a fresh server, then the probe's case.
run() {
  stop
  rm -f "$work/port"
  "$STORE" serve --host 127.0.0.1 --port 0 --ready-file "$work/port" >"$work/store.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
  [ -s "$work/port" ] || { cat "$work/store.log"; echo "the store did not start" >&2; exit 1; }
  local c=$1
  shift
  timeout --kill-after=5 300 "$PY" "$probe" "$c" 127.0.0.1 "$(cat "$work/port")" "$pid" "$@"
}

echo "# $STORE"
for keys in 131072 3000; do
  run cpu --keys "$keys" --reqs $((keys > 10000 ? 20 : 200))
  run rss --keys "$keys" --conns 16
  run ping --keys "$keys" --conns 4 --seconds 5
  run ping --keys "$keys" --conns 16 --seconds 5
done
