#!/usr/bin/env bash
# Installs the schedulers the tests run for real, only where missing (`make deps`): Debian's slurm-wlm (slurmctld,
# slurmd, srun, sbatch, scancel, scontrol) and munge for tests/integration/56-slurm.sh, openssh-server and
# openssh-client for tests/integration/59-hostfile-ssh.sh. The tests start their own daemons in namespaces; the
# packages' services must not start on the machine: while installing, a policy-rc.d that forbids starting
# services is put in place where none exists (and removed after).
# Exit codes: 0 ok, 1 an install step failed.
set -euo pipefail
want=(slurm-wlm munge openssh-server openssh-client)
need=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
[ ${#need[@]} -gt 0 ] || exit 0
echo "deps-sched: installing ${need[*]}"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
policy=/usr/sbin/policy-rc.d
ours=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# deps-sched.sh: no service starts while installing (removed after)\nexit 101\n' |
    $SUDO tee "$policy" >/dev/null && $SUDO chmod 755 "$policy" && ours=1
fi
cleanup() { [ $ours = 0 ] || $SUDO rm -f "$policy"; }
trap cleanup EXIT
apt=($SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
"${apt[@]}" update -qq || { echo "deps-sched: apt-get update failed; check apt sources" >&2; exit 1; }
"${apt[@]}" install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
  { echo "deps-sched: apt-get install ${need[*]} failed; install them by hand, then run make again" >&2; exit 1; }
exit 0
