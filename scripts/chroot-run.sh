#!/usr/bin/env bash
# Runs a command inside the torch 2.6 test chroot, in a private mount namespace (mounts vanish with it):
# /proc, /dev and /dev/shm from the host, the repository at /trun (read-write), the network shared.
# Usage: scripts/chroot-run.sh CMD [ARGS...]   e.g. scripts/chroot-run.sh python3 /trun/tests/store/ops.py
# Environment: TRUN_CHROOT (default /var/cache/trun/trixie). Exit: the command's status; 127 no chroot.
set -euo pipefail
root=${TRUN_CHROOT:-/var/cache/trun/trixie}
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$root/.trun-ready" ]; then
  echo "chroot-run: no test chroot at $root; run 'make deps' (scripts/chroot.sh builds it)" >&2
  exit 127
fi
exec unshare --mount --propagation private -- /bin/sh -ec '
  root=$1; repo=$2; shift 2
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mkdir -p "$root/trun"
  mount --bind "$repo" "$root/trun"
  exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    USE_LIBUV=0 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 "$@"
' sh "$root" "$repo" "$@"
