#!/usr/bin/env bash
# Instance identity against a fake IMDS: for each mode of tests/fakes/imds_server.py (normal token flow, no
# placement group, a server that never answers, 401 / 400 on the token PUT, malformed replies, malformed
# fields, IMDSv1 only) and a closed port, starts the fake on 127.0.0.1 and runs build/tests/test_instance
# with TRUN_IMDS_ENDPOINT / TRUN_IMDS_MODE / TRUN_IMDS_CONTROL; the test program checks the fields, the
# fallback to DMI, the time taken (printed; asserted only < 5 s) and, through the fake's request counter,
# that no_imds makes no connection. Only loopback traffic; everything started here is killed on exit.
# Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=${TRUN_REPO:-$(cd "$here/../.." && pwd)}
build=${TRUN_BUILD:-$repo/build}
py=${TRUN_HOST_PY:-/usr/bin/python3}
prog=$build/tests/test_instance
fake=$repo/tests/fakes/imds_server.py
tmp=$(mktemp -d /tmp/trun-imds-test.XXXXXX)
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
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "$*" >&2; exit 77; }

[ -x "$prog" ] || fail "$prog is missing; run 'make' first"
[ -x "$py" ] || fail "no $py to run the fake IMDS server (the deps step installs Debian's python3: run 'make deps')"

# start_server MODE: starts the fake; sets imds_port and ctl_port.
start_server() {
  local mode=$1 pf=$tmp/ports.$1
  rm -f "$pf"
  "$py" "$fake" --mode "$mode" --port-file "$pf" 2>"$tmp/server.$mode.log" &
  server_pid=$!
  for _ in $(seq 100); do
    [ -s "$pf" ] && break
    kill -0 "$server_pid" 2>/dev/null || fail "fake IMDS ($mode) exited at start: $(cat "$tmp/server.$mode.log")"
    sleep 0.05
  done
  [ -s "$pf" ] || fail "fake IMDS ($mode) wrote no port file within 5 s"
  read -r imds_port ctl_port <"$pf"
}

# run_mode MODE [PORT]: test_instance against the fake (or, for "refused", a closed port).
run_mode() {
  local mode=$1 endpoint control=
  if [ "$mode" = refused ]; then
    endpoint=http://127.0.0.1:$2
  else
    endpoint=http://127.0.0.1:$imds_port
    control=http://127.0.0.1:$ctl_port
  fi
  echo "== mode $mode: TRUN_IMDS_ENDPOINT=$endpoint"
  if ! env -u http_proxy -u HTTP_PROXY -u AWS_EC2_METADATA_DISABLED TRUN_REPO="$repo" \
    TRUN_IMDS_ENDPOINT="$endpoint" TRUN_IMDS_MODE="$mode" TRUN_IMDS_CONTROL="$control" \
    CK_VERBOSITY=normal timeout --kill-after=5 60 "$prog"; then
    [ -f "$tmp/server.$mode.log" ] && sed 's/^/    server: /' "$tmp/server.$mode.log"
    fail "mode $mode: test_instance failed"
  fi
}

last_port=
for mode in normal nogroup stall token401 token400 malformed badfields v1only; do
  start_server "$mode"
  run_mode "$mode"
  last_port=$imds_port
  stop_server
done
# Nothing listens on the last fake's port any more: a refused connect must fall back at once.
run_mode refused "$last_port"
echo "ok: instance identity against the fake IMDS in every mode"
