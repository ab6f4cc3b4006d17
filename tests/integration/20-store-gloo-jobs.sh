#!/usr/bin/env bash
# Two real gloo jobs share one trun-store at the same time: a 3-rank torch 1.13 job (host python) and a
# 3-rank torch 2.6 job (trixie chroot). Workers are started by hand the way torchrun starts them:
# RANK, WORLD_SIZE=3, MASTER_ADDR=127.0.0.1, MASTER_PORT=<trun-store port>, TORCHELASTIC_USE_AGENT_STORE=True
# (every rank, rank 0 included, is a client of trun-store; no rank hosts a server), and for 1.13
# TORCHELASTIC_RESTART_COUNT=0. Each rank runs tests/store/allreduce.py: init_process_group('gloo',
# init_method='env://'), all-reduce of [rank+1]*4 == 6, a new_group all-reduce, a barrier. All 6 must exit 0.
# The 2.6 job also sets TORCH_DIST_INIT_BARRIER=1 (store-based barrier: ADD polling + WAIT on :last_worker).
#
# Key spaces: 1.13 wraps the agent store in PrefixStore("/worker/attempt_0") -> keys "//worker/attempt_0/...";
# 2.6 uses no prefix -> "/default_pg/...". Both add to the shared counter "init/" (nobody waits on it).
# After the jobs the script lists the store's keys (LIST, tests/store/store_keys.py) and checks that every key
# is in one of those two spaces or is init/ (== 6), i.e. the namespaces are disjoint without further setup.
set -u
TRUN_REPO=${TRUN_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
TRUN_BUILD=${TRUN_BUILD:-$TRUN_REPO/build}
TRUN_CHROOT=${TRUN_CHROOT:-/var/cache/trun/trixie}
TRUN_HOST_PY=${TRUN_HOST_PY:-/usr/bin/python3}
export TRUN_CHROOT
STORE=$TRUN_BUILD/trun-store
SAFETY=240 # seconds: generous bound for a job, never a measured time
WORLD=3

[ -x "$STORE" ] || { echo "no $STORE: run make first" >&2; exit 1; }
if ! "$TRUN_HOST_PY" -c 'import torch.distributed' 2>/dev/null; then
  echo "no torch at $TRUN_HOST_PY (Debian python3-torch 1.13 expected)" >&2
  exit 77
fi
if [ ! -f "$TRUN_CHROOT/.trun-ready" ]; then
  echo "no torch 2.6 test chroot at $TRUN_CHROOT (make deps builds it)" >&2
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/trun-20.XXXXXX")
pgids=()
cleanup() {
  local p
  for p in "${pgids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
  sleep 0.3
  for p in "${pgids[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
bg() { # bg NAME CMD...: own process group, output to $work/NAME.log
  local name=$1
  shift
  setsid "$@" >"$work/$name.log" 2>&1 </dev/null &
  pgids+=($!)
  LAST_PID=$!
}

bg store "$STORE" serve --host 127.0.0.1 --port 0 --ready-file "$work/port"
store_pid=$LAST_PID
for ((i = 0; i < 300; i++)); do
  [ -s "$work/port" ] && break
  kill -0 $store_pid 2>/dev/null || { cat "$work/store.log"; echo "trun-store died" >&2; exit 1; }
  sleep 0.1
done
PORT=$(cat "$work/port")
echo "# trun-store pid $store_pid port $PORT"

common=(RANK_PLACEHOLDER WORLD_SIZE=$WORLD MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT
        TORCHELASTIC_USE_AGENT_STORE=True GLOO_SOCKET_IFNAME=lo)
pids=()
names=()
for ((r = 0; r < WORLD; r++)); do
  env_r=("RANK=$r" "${common[@]:1}")
  bg "t113-rank$r" timeout --kill-after=5 $SAFETY env "${env_r[@]}" TORCHELASTIC_RESTART_COUNT=0 \
    "$TRUN_HOST_PY" "$TRUN_REPO/tests/store/allreduce.py"
  pids+=($LAST_PID); names+=("t113-rank$r")
  bg "t26-rank$r" timeout --kill-after=5 $SAFETY "$TRUN_REPO/scripts/chroot-run.sh" env "${env_r[@]}" \
    TORCH_DIST_INIT_BARRIER=1 python3 /trun/tests/store/allreduce.py
  pids+=($LAST_PID); names+=("t26-rank$r")
done

failures=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  rc=$?
  echo "== ${names[$i]} exit $rc"
  grep -v -e '^\[W' -e '^frame #' "$work/${names[$i]}.log" | sed 's/^/   /'
  if [ $rc -eq 0 ] && ! grep -q ': ok$' "$work/${names[$i]}.log"; then rc=1; fi # exit 0 without 'ok'
  [ "$rc" -eq 0 ] || { echo "FAIL: ${names[$i]} (exit $rc)"; failures=$((failures + 1)); }
done

kill -0 $store_pid 2>/dev/null || { echo "FAIL: trun-store died"; failures=$((failures + 1)); }
echo "== keys in trun-store after both jobs"
if timeout 60 "$TRUN_HOST_PY" "$TRUN_REPO/tests/store/store_keys.py" 127.0.0.1 "$PORT" >"$work/keys" 2>&1; then
  sed 's/^/   /' "$work/keys"
  n113=$(grep -c "^b'//worker/attempt_0/" "$work/keys")
  n26=$(grep -c "^b'/default_pg/" "$work/keys")
  other=$(grep -v -e "^b'//worker/attempt_0/" -e "^b'/default_pg/" -e "^b'init/' " "$work/keys")
  init=$(grep "^b'init/' " "$work/keys")
  echo "   1.13 keys: $n113, 2.6 keys: $n26, init/: ${init:-missing}"
  [ "$n113" -gt 0 ] && [ "$n26" -gt 0 ] || { echo "FAIL: expected keys of both jobs"; failures=$((failures + 1)); }
  [ -z "$other" ] || { echo "FAIL: keys outside both name spaces: $other"; failures=$((failures + 1)); }
  [ "$init" = "b'init/' 1 b'$((2 * WORLD))'" ] || { echo "FAIL: init/ should count $((2 * WORLD)) clients"; failures=$((failures + 1)); }
else
  cat "$work/keys"
  echo "FAIL: could not list the store's keys"
  failures=$((failures + 1))
fi
echo "== trun-store log"
sed 's/^/   /' "$work/store.log"
[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "both jobs passed"
