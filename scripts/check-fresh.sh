#!/usr/bin/env bash
# `make check-fresh`: all of `make check` in a fresh Debian bookworm root, the honest test of the install
# steps (this machine and CI carry more than a fresh box does). The root is debootstrap's minbase plus git and
# make, cached pristine under /var/cache/trun/bookworm-fresh (scripts/debroot.sh) and used through a
# throwaway overlay (scripts/root-run.sh): the root is a mount point, it has the host's CA bundle and DNS
# settings, host name trun-fresh and a standard Debian /etc/hosts ("127.0.1.1 trun-fresh"), its own PID,
# mount and UTS namespaces. Inside, a clone of this checkout's HEAD (committed work only, as CI sees it) runs
# `make check` as root, installing everything it needs from Debian and npm and building the trixie chroot.
# Usage: scripts/check-fresh.sh   (TRUN_FRESH_ROOT names another cached root). Log: build/check-fresh.log.
# Exit codes: make check's; 1 the root could not be built.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${TRUN_FRESH_ROOT:-/var/cache/trun/bookworm-fresh}
"$repo/scripts/deps.sh" debootstrap git
"$repo/scripts/debroot.sh" bookworm "$root" git make
[ -z "$(git -C "$repo" status --porcelain --untracked-files=no)" ] ||
  echo "check-fresh: uncommitted changes are not tested: the fresh root gets a clone of HEAD $(git -C "$repo" rev-parse --short HEAD)" >&2
src=$(mktemp -d /var/tmp/trun-fresh-src.XXXXXX)
trap 'rm -rf "$src"' EXIT
git clone -q "$repo" "$src/trun"
mkdir -p "$repo/build"
log=$repo/build/check-fresh.log
echo "check-fresh: make check of $(git -C "$src/trun" rev-parse --short HEAD) in a fresh bookworm root (log: $log)"
start=$(date +%s)
rc=0
"$repo/scripts/root-run.sh" --hostname trun-fresh --bind "$src/trun:/root/trun" "$root" \
  /bin/sh -c 'cd /root/trun && CI=true make check' 2>&1 | tee "$log" || rc=$?
echo "check-fresh: exit $rc after $(( $(date +%s) - start )) s" | tee -a "$log"
exit $rc
