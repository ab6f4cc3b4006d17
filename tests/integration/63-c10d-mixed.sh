#!/usr/bin/env bash
# c10d dynamic rendezvous, mixed fleets (issue 4): trun agents and a real torchrun agent join one
# rendezvous (torchelastic's pickled state under compare-and-set) and run one gloo job. Each kind takes
# its turn serving the store. torch 1.13 on the host (trun told torch_version=1.13: its store and state
# layout), torch 2.6 in the chroot (trun's default layout; the workers of every agent run 2.6).
# Checks: every agent exits 0, the all-reduce over all 5 ranks is right on every rank (allreduce.py),
# every rank 0..4 reported once, and the trun workers got torchrun's TORCHELASTIC_USE_AGENT_STORE rule.
set -u
. "$(dirname "$0")/../helpers/lib.sh"
need_trun
need_host_torch

# Below the kernel's ephemeral range (32768 and up by default), where no outgoing connection takes it first.
port_base=$((20000 + RANDOM % 10000))
n=0

# mixed VERSION HOST: VERSION 1.13 (host torch) or 2.6 (chroot); HOST torchrun or trun serves the store.
mixed() {
  local ver=$1 host=$2 out="$tmp/$1-$2" port=$((port_base + n)) pids=() i rc=0
  n=$((n + 1))
  mkdir -p "$out"
  local conf_t conf_r tr_cmd w_cmd
  if [ "$host" = torchrun ]; then conf_t=is_host=1 conf_r=is_host=0; else conf_t=is_host=0 conf_r=is_host=1; fi
  if [ "$ver" = 1.13 ]; then
    conf_r="$conf_r,torch_version=1.13"
    tr_cmd=("$host_py" "$repo/tests/tools/torchrun113.py" --nnodes 3 --nproc_per_node 1 --rdzv_backend c10d
      --rdzv_endpoint "127.0.0.1:$port" --rdzv_id "mix$n" --rdzv_conf "$conf_t" --monitor_interval 1)
    w_cmd=("$repo/tests/helpers/allreduce.py" "$out")
    tr_cmd+=("${w_cmd[@]}")
  else
    tr_cmd=("$repo/scripts/chroot-run.sh" --keep-env python3 -m torch.distributed.run --nnodes 3 --nproc-per-node 1
      --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "mix$n" --rdzv-conf "$conf_t"
      --monitor-interval 1 /trun/tests/helpers/allreduce.py "$out")
    w_cmd=(--no-python "$repo/scripts/chroot-run.sh" --keep-env python3 /trun/tests/helpers/allreduce.py "$out")
  fi
  local trun_cmd=("$trun" --nnodes 3 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port"
    --rdzv-id "mix$n" --monitor-interval 1 --log-dir "$out/logs")
  # The store's server starts first; the others retry until it is there.
  if [ "$host" = torchrun ]; then
    (cd "$repo" && PYTHON_EXEC=$host_py exec setsid timeout 200 "${tr_cmd[@]}") >"$out/torchrun.log" 2>&1 &
    pids+=($!)
    sleep 2
    for i in 0 1; do
      PYTHON_EXEC=$host_py setsid timeout 200 "${trun_cmd[@]}" --rdzv-conf "$conf_r" "${w_cmd[@]}" \
        >"$out/trun$i.log" 2>&1 &
      pids+=($!)
    done
  else
    PYTHON_EXEC=$host_py setsid timeout 200 "${trun_cmd[@]}" --rdzv-conf "$conf_r" "${w_cmd[@]}" \
      >"$out/trun0.log" 2>&1 &
    pids+=($!)
    sleep 1
    local conf_r2=${conf_r/is_host=1/is_host=0}
    PYTHON_EXEC=$host_py setsid timeout 200 "${trun_cmd[@]}" --rdzv-conf "$conf_r2" "${w_cmd[@]}" \
      >"$out/trun1.log" 2>&1 &
    pids+=($!)
    (cd "$repo" && PYTHON_EXEC=$host_py exec setsid timeout 200 "${tr_cmd[@]}") >"$out/torchrun.log" 2>&1 &
    pids+=($!)
  fi
  _bg_pgids+=("${pids[@]}")
  for i in "${pids[@]}"; do wait "$i" || rc=$?; done
  local f
  for f in torchrun trun0 trun1; do
    grep -q "all_reduce ok" "$out/$f.log" || {
      tail -n 30 "$out"/*.log >&2
      fail "$ver/$host: the $f agent's workers did not all-reduce"
    }
  done
  [ "$rc" = 0 ] || {
    tail -n 30 "$out"/*.log >&2
    fail "$ver/$host: an agent exited $rc"
  }
  for i in 0 1 2 3 4; do [ -f "$out/ok.0.$i" ] || fail "$ver/$host: rank $i did not finish"; done
  [ "$(ls "$out" | grep -c '^ok\.')" = 5 ] || fail "$ver/$host: more than 5 ranks reported"
  grep -q "^$ver" "$out/ok.0.0" || fail "$ver/$host: rank 0 ran torch $(cat "$out/ok.0.0"), not $ver"
  echo "ok: torch $ver, $host serves the store: 3 agents (1 torchrun + 2 trun), 5 ranks"
}

mixed 1.13 torchrun
mixed 1.13 trun
need_chroot
mixed 2.6 torchrun
mixed 2.6 trun
