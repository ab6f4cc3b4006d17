#!/usr/bin/env bash
# Runs a command inside the torch 2.6 test chroot, in a private mount namespace (mounts vanish with it):
# /proc, /dev (with /dev/shm) and /tmp from the host, the repository at /trun (read-write), the network shared.
# Usage: scripts/chroot-run.sh [--keep-env] CMD [ARGS...]   e.g. scripts/chroot-run.sh python3 /trun/tests/x.py
# The environment is cleared unless --keep-env (then it passes through, with the chroot's PATH), which is
# how trun starts torch 2.6 workers in the chroot: trun --no-python scripts/chroot-run.sh --keep-env python3 ...
# Environment: TRUN_CHROOT (default /var/cache/trun/trixie). Exit: the command's status; 127 no chroot.
set -euo pipefail
root=${TRUN_CHROOT:-/var/cache/trun/trixie}
repo=$(cd "$(dirname "$0")/.." && pwd)
keep=0
if [ "${1:-}" = "--keep-env" ]; then keep=1; shift; fi
if [ ! -f "$root/.trun-ready" ]; then
  echo "chroot-run: no test chroot at $root; run 'make deps' (scripts/chroot.sh builds it)" >&2
  exit 127
fi
exec unshare --mount --propagation private -- /bin/sh -ec '
  root=$1; repo=$2; keep=$3; shift 3
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --bind /tmp "$root/tmp"
  mount --bind /etc/hosts "$root/etc/hosts"
  mkdir -p "$root/trun"
  mount --bind "$repo" "$root/trun"
  clear=-i; [ "$keep" = 1 ] && clear=
  exec chroot "$root" /usr/bin/env $clear PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    USE_LIBUV=0 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 "$@"
' sh "$root" "$repo" "$keep" "$@"
