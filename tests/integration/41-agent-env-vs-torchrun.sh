#!/usr/bin/env bash
# runner: lock=29400
# The worker environment trun gives vs real torchrun's, per local rank, with the same command line and the
# same launcher environment: torch 1.13 (host; Debian's torchrun through tests/tools/torchrun113.py) vs trun,
# and torchrun 2.6 (trixie chroot) vs trun starting chroot workers. tests/helpers/dumpenv.py dumps os.environ;
# tests/helpers/envdiff.py compares (key sets equal, values equal) and lists the excluded keys with reasons.
# Allowed, known difference: torch 1.13's torchrun sets NCCL_ASYNC_ERROR_HANDLING=1, trun sets the newer name
# TORCH_NCCL_ASYNC_ERROR_HANDLING=1; trun gives the workers of each job their own NCCL RAS port,
# NCCL_RAS_ADDR=127.0.0.1:<port> (the same on every local rank), which torchrun leaves unset (NCCL's shared
# default localhost:28028), and PYTHONFAULTHANDLER=1 (a hang's culprit prints its Python stack; Python also
# prints one on a crash). On a node with a GPU trun also adds torch's
# flight-recorder variables (TORCH_NCCL_TRACE_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT, TORCH_FR_DUMP_TEMP_FILE,
# TORCH_NCCL_DEBUG_INFO_TEMP_FILE, TORCH_NCCL_DEBUG_INFO_PIPE_FILE): envdiff.py's FLIGHT_RECORDER list accepts
# exactly those, with their values (none on a CPU-only box). Any other difference fails the test.
# Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch

# Both launchers get exactly the same environment: this one, plus PYTHON_EXEC (trun needs it to find the host
# torch; torchrun honours it too, so its workers see the same value), started the same way from /tmp.
export PYTHON_EXEC=$host_py
bad=0

# dump NAME CMD...: runs the launcher, which must exit 0 and leave env.<lr>.json for every local rank.
dump() {
  local name=$1
  shift
  mkdir -p "$tmp/$name"
  echo "== $name: $*"
  local rc=0
  (cd /tmp && run_pg "$@" "$tmp/$name") >"$tmp/$name.log" 2>&1 || rc=$?
  sed 's/^/    /' "$tmp/$name.log"
  [ $rc -eq 0 ] || fail "$name: exited $rc, want 0"
  for lr in 0 1; do [ -s "$tmp/$name/env.$lr.json" ] || fail "$name: no env dump of local rank $lr"; done
}

dump t113 "$host_py" "$repo/tests/tools/torchrun113.py" --standalone --nproc_per_node 2 "$repo/tests/helpers/dumpenv.py"
dump r113 "$trun" --standalone --nproc_per_node 2 "$repo/tests/helpers/dumpenv.py"
# Deliberate differences (docs/cli.md, "What the workers get"): trun always names TORCH_NCCL_ASYNC_ERROR_HANDLING
# (torch >= 2.2's name), exports TORCHELASTIC_SIGNALS_TO_HANDLE as torchrun >= 2.9 does, and always hosts the
# workers' store in the agent (TORCHELASTIC_USE_AGENT_STORE=True), which torchrun 1.13's c10d/standalone did not,
# and gives the job its own NCCL RAS port (NCCL_RAS_ADDR) and PYTHONFAULTHANDLER=1 (docs/observability.md).
"$host_py" "$repo/tests/helpers/envdiff.py" torch-1.13 "$tmp/t113" "$tmp/r113" 2 \
  rename:NCCL_ASYNC_ERROR_HANDLING=TORCH_NCCL_ASYNC_ERROR_HANDLING \
  newer:TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT \
  value:TORCHELASTIC_USE_AGENT_STORE='False>True' own:NCCL_RAS_ADDR='127\.0\.0\.1:[1-9][0-9]*' own:PYTHONFAULTHANDLER=1 || bad=1

need_chroot
# --local-addr localhost for both: the chroot's /etc/hosts does not know this host's name, so torchrun 2.6
# (which publishes its host name as MASTER_ADDR of its agent store) would leave its workers retrying forever.
dump t26 "$repo/scripts/chroot-run.sh" --keep-env python3 -m torch.distributed.run --standalone \
  --nproc_per_node 2 --local-addr localhost /trun/tests/helpers/dumpenv.py
dump r26 "$trun" --standalone --nproc_per_node 2 --local-addr localhost --no-python \
  "$repo/scripts/chroot-run.sh" --keep-env python3 /trun/tests/helpers/dumpenv.py
"$host_py" "$repo/tests/helpers/envdiff.py" torch-2.6 "$tmp/t26" "$tmp/r26" 2 \
  newer:TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT own:NCCL_RAS_ADDR='127\.0\.0\.1:[1-9][0-9]*' \
  own:PYTHONFAULTHANDLER=1 || bad=1
[ $bad -eq 0 ] || fail "the worker environments differ (DIFFERENCE lines above)"
echo PASS
