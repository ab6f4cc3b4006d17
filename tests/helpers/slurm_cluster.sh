#!/usr/bin/env bash
# A real Slurm 22.05 cluster on one box (Debian's slurm-wlm and munge), for the Slurm tests; see
# ../shared/spec/slurm-cluster.md for why each piece is needed.
#
#   tests/helpers/slurm_cluster.sh [--nodes N] [--cpus C] [--gpus G] [--net A.B.C] CMD [ARG...]
#
# Starts munged, slurmctld on host "ctl" (A.B.C.1) and N slurmd "nodes" n1..nN (A.B.C.11.., each in its own
# network and UTS namespace, CPUs=C each, G GPUs each as GRES over stand-in device files, one partition
# "debug" with OverSubscribe), waits until sinfo shows every node idle, runs CMD on ctl (the login node: srun,
# sbatch, scancel, scontrol work as on a real one), then tears everything down and exits with CMD's status.
# Defaults: 3 nodes, 2 CPUs, no GPUs, 10.253.0. `tests/helpers/slurm_cluster.sh bash` is a shell on the cluster.
#
# Everything lives in tests/helpers/sandbox_lib.sh's sandbox, which cannot outlive this script: the kernel kills
# every process of the cluster (daemons, slurmstepd, job processes) when it ends, however it ends; /run is
# private (munge's socket, the daemons' state and logs, the node namespaces), and so are /etc/slurm and
# /etc/hosts (bind mounts): nothing is added to the machine's files, its network namespace or /etc/hosts, and
# two clones can run it at the same time.
#
# CMD's environment: SLURM_CLUSTER_NODES ("n1 n2 n3"), SLURM_CLUSTER_NET (A.B.C), SLURM_CLUSTER_STATE (the
# state directory: etc/slurm, logs/), and on PATH: slurm-node-kill nK (the host dies: every process in its
# network namespace SIGKILLed at once, slurmd included) and slurm-node-start nK (its slurmd again; the node
# returns to service when it registers). `ip netns pids nK` lists the processes of node nK.
# Exit: CMD's status; 77 (reason on stderr) where user or network namespaces, veth pairs or bridges cannot be
# made; 1 when a tool is missing (the deps step installs slurm-wlm and munge) or the cluster does not come up.
set -euo pipefail

nodes=3 cpus=2 net=10.253.0 gpus=0
while [ $# -gt 0 ]; do
  case $1 in
  --nodes) nodes=$2; shift 2 ;;
  --gpus) gpus=$2; shift 2 ;;
  --cpus) cpus=$2; shift 2 ;;
  --net) net=$2; shift 2 ;;
  --) shift; break ;;
  -*) echo "slurm_cluster.sh: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: slurm_cluster.sh [--nodes N] [--cpus C] [--gpus G] [--net A.B.C] CMD [ARG...]" >&2; exit 2; }

SB_NAME=slurm_cluster
. "$(dirname "$0")/sandbox_lib.sh"
sandbox_need "slurm-wlm, munge, iproute2" slurmctld slurmd slurmstepd munged mungekey munge unmunge srun sbatch \
  scontrol sinfo squeue scancel ip unshare nsenter mknod
sandbox_enter "$0" --nodes "$nodes" --cpus "$cpus" --gpus "$gpus" --net "$net" -- "$@"

# ---- inside: PID 1 of the sandbox, host "ctl" ----------------------------------------------------------------
state=/run/trun-slurm
node_names=()
for ((i = 1; i <= nodes; i++)); do node_names+=("n$i"); done
pids_daemons=()

sandbox_init "$net" ctl
for n in "${node_names[@]}"; do sandbox_host "$n" "$net.$((10 + ${n#n}))"; done
mkdir -p "$state"/{etc,logs,ctld,spool} /run/munge
chmod 700 /run/munge

# /etc/hosts: the machine's lines plus the cluster's.
{ cat /etc/hosts; echo "# trun Slurm test cluster"; echo "$net.1 ctl"
  for ((i = 1; i <= nodes; i++)); do echo "$net.$((10 + i)) n$i"; done; } >"$state/etc/hosts"
sandbox_etc hosts "$state/etc/hosts"

# cgroups: slurmd 22.05 initialises its cgroup plugin even with proctrack/linuxproc + task/none; name the
# layout this machine has (a tmpfs of v1 controllers, or the unified v2 hierarchy).
cg_type=$(stat -f -c %T /sys/fs/cgroup 2>/dev/null || echo none)
case $cg_type in
cgroup2fs) cgroup_conf="CgroupPlugin=cgroup/v2
IgnoreSystemd=yes" ;;
tmpfs) cgroup_conf="CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
CgroupAutomount=no" ;;
*) sb_die "/sys/fs/cgroup is '$cg_type': neither cgroup v1 (tmpfs) nor v2 (cgroup2fs); slurmd needs one" ;;
esac

mkdir -p "$state/etc/slurm"
echo "$cgroup_conf" >"$state/etc/slurm/cgroup.conf"
{
  cat <<EOF
# The trun test cluster ($(date -u +%FT%TZ)): ctl + ${nodes} nodes, ${cpus} CPUs each (tests/helpers/slurm_cluster.sh)
ClusterName=trun
SlurmctldHost=ctl($net.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool/%n
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd-%n.pid
SlurmctldLogFile=$state/logs/slurmctld.log
SlurmdLogFile=$state/logs/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# Quick turnaround for tests: a node that stops answering is DOWN after 5 s; 5 s from SIGTERM to SIGKILL.
# A ping to a dead node fails only after MessageTimeout (Slurm retries a refused connection that long, default
# 10 s), and the controller sets a node DOWN after two failed pings: with 5 s each, a lost node is DOWN (and its
# job step ended) about 15 s after it dies instead of 26. 5 s is still ample for any RPC between the daemons.
SlurmdTimeout=5
MessageTimeout=5
KillWait=5
MinJobAge=300
EOF
  gres=""
  if [ "$gpus" -gt 0 ]; then
    echo "GresTypes=gpu"
    gres=" Gres=gpu:$gpus"
  fi
  for ((i = 1; i <= nodes; i++)); do
    echo "NodeName=n$i NodeAddr=$net.$((10 + i)) NodeHostname=n$i CPUs=$cpus$gres State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=$(IFS=,; echo "${node_names[*]}") Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
} >"$state/etc/slurm/slurm.conf"
# --gpus N: N GPUs per node as Slurm GRES over stand-in device files (the numbers are what Slurm uses for
# CUDA_VISIBLE_DEVICES); the workers see GPUs only through the fake NVML the tests load.
if [ "$gpus" -gt 0 ]; then
  mkdir -p "$state/dev"
  # Character devices (Slurm checks): /dev/null's numbers, harmless if anything opens them.
  for ((g = 0; g < gpus; g++)); do mknod "$state/dev/nvidia$g" c 1 3; done
  echo "Name=gpu File=$state/dev/nvidia[0-$((gpus - 1))]" >"$state/etc/slurm/gres.conf"
fi
sandbox_etc slurm "$state/etc/slurm"

# Node control for CMD (on its PATH): slurm-node-kill nK = the host dies (SIGKILL to every process in its
# network namespace at once: slurmd, slurmstepd, the job's processes); slurm-node-start nK = slurmd again
# (the node returns to service when it registers: ReturnToService=2).
mkdir -p "$state/bin"
cat >"$state/bin/slurm-node-kill" <<'EOS'
#!/bin/sh
# slurm-node-kill NODE: SIGKILL every process in NODE's network namespace at once (the host is lost).
pids=$(ip netns pids "${1:?usage: slurm-node-kill NODE}") || exit 1
[ -z "$pids" ] || kill -KILL $pids
EOS
cat >"$state/bin/slurm-node-start" <<EOS
#!/bin/sh
# slurm-node-start NODE: starts NODE's slurmd again (detached; its pid in $state/slurmd-NODE.pid).
n=\${1:?usage: slurm-node-start NODE}
setsid nsenter --net=/run/netns/"\$n" unshare --uts sh -c 'hostname "\$0" && exec slurmd -D' "\$n" \
  >>"$state/logs/slurmd-\$n.stderr" 2>&1 </dev/null &
EOS
chmod +x "$state/bin/slurm-node-kill" "$state/bin/slurm-node-start"

# Daemons. Each stays a child of this shell (started with exec all the way), so its pid is known.
teardown() {
  local rc=$? p
  trap - EXIT INT TERM
  if [ "${#pids_daemons[@]}" -gt 0 ] && squeue -h -o %i >/dev/null 2>&1; then
    local jobs; jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
      sb_say "cancelling jobs left running: $jobs"
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      for _ in $(seq 1 100); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
    fi
  fi
  # slurmd restarted by slurm-node-start is no child of ours: its pid file names it.
  for p in "$state"/slurmd-*.pid; do [ -f "$p" ] && pids_daemons+=("$(cat "$p")"); done
  for p in "${pids_daemons[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    local alive=0
    for p in "${pids_daemons[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    for f in "$state"/logs/*.log; do
      [ -f "$f" ] || continue
      echo "---- last lines of $(basename "$f") ----" >&2
      tail -n 15 "$f" >&2
    done
  fi
  # Whatever is left (a stuck slurmstepd, job processes) dies with this PID namespace when we exit.
  left=$(ps -e -o pid=,comm= | awk -v me=$$ '$1 != me && $1 != 1 && $2 ~ /^(slurm|munged)/' | wc -l)
  [ "$left" = 0 ] || sb_say "$left Slurm/munge process(es) did not stop on SIGTERM; the namespace's end kills them"
  sandbox_down
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mungekey -c -k "$state/munge.key" 2>/dev/null || sb_die "mungekey -c -k $state/munge.key failed"
chmod 400 "$state/munge.key"
munged --foreground --force --key-file="$state/munge.key" --log-file="$state/logs/munged.log" \
  --pid-file="$state/munged.pid" --seed-file="$state/munged.seed" --socket=/run/munge/munge.socket.2 \
  >>"$state/logs/munged.log" 2>&1 &
pids_daemons+=($!)
for _ in $(seq 1 50); do [ -S /run/munge/munge.socket.2 ] && break; sleep 0.1; done
munge -n </dev/null | unmunge >/dev/null 2>&1 || sb_die "munged does not answer (see $state/logs/munged.log)"

slurmctld -D -i >>"$state/logs/slurmctld.stderr" 2>&1 &
pids_daemons+=($!)
for n in "${node_names[@]}"; do
  mkdir -p "$state/spool/$n"
  sandbox_in "$n" slurmd -D >>"$state/logs/slurmd-$n.stderr" 2>&1 &
  pids_daemons+=($!)
done

# Up when every node is idle (slurmd registered with the controller).
t0=$(date +%s)
until [ "$(sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 == "idle"' | wc -l)" = "$nodes" ]; do
  for p in "${pids_daemons[@]}"; do
    kill -0 "$p" 2>/dev/null || {
      cat "$state"/logs/*.stderr >&2 2>/dev/null
      sb_die "a daemon exited at start-up (pid $p); see the logs above"
    }
  done
  [ $(($(date +%s) - t0)) -lt 60 ] || { sinfo -N >&2 || true; sb_die "the nodes are not idle 60 s after start"; }
  sleep 0.3
done
sb_say "up in $(($(date +%s) - t0)) s: ctl $net.1, nodes ${node_names[*]} ($cpus CPUs each, cgroup ${cgroup_conf%%$'\n'*})"

export SLURM_CLUSTER_NODES="${node_names[*]}" SLURM_CLUSTER_NET=$net SLURM_CLUSTER_STATE=$state
export PATH=$state/bin:$PATH
set +e
"$@"
rc=$?
set -e
exit $rc
