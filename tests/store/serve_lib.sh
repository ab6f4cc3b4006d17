# Starting and stopping a trun-store serve for the store integration tests (25, 27); sourced, not run.
# Needs STORE (the trun-store binary) and work (a scratch directory, removed by the caller's trap, which
# also calls store_cleanup).
store_pid=

# store_start ARGS...: trun-store serve on 127.0.0.1, a free port, in its own process group; sets store_pid
# and PORT once it listens; its output goes to $work/store.log.
store_start() {
  rm -f "$work/port"
  setsid "$STORE" serve --host 127.0.0.1 --port 0 --ready-file "$work/port" "$@" >"$work/store.log" 2>&1 </dev/null &
  store_pid=$!
  local i
  for ((i = 0; i < 300; i++)); do
    [ -s "$work/port" ] && break
    kill -0 $store_pid 2>/dev/null || { cat "$work/store.log"; echo "FAIL: trun-store died at start" >&2; exit 1; }
    sleep 0.1
  done
  PORT=$(cat "$work/port")
}

# store_stop: SIGTERM, which must stop it with exit 0 (tools/store_serve.c).
store_stop() {
  kill -TERM $store_pid
  wait $store_pid
  local rc=$?
  store_pid=
  [ $rc -eq 0 ] || { echo "FAIL: trun-store exit $rc on SIGTERM"; exit 1; }
}

# store_cleanup: kills a store still running (the caller's EXIT trap).
store_cleanup() {
  if [ -n "$store_pid" ]; then
    kill -TERM -- "-$store_pid" 2>/dev/null
    sleep 0.3
    kill -KILL -- "-$store_pid" 2>/dev/null
  fi
}
