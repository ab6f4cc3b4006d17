#!/usr/bin/env bash
# Builds a cached Debian root with debootstrap (variant minbase) when it is missing or was made with another
# package list. Usage: scripts/debroot.sh SUITE DIR [PACKAGE...]
# The roots the tests use live under /var/cache/trun (trixie with torch 2.6, a pristine bookworm for
# `make check-fresh`, ...); callers that change a root run it through an overlay (scripts/root-run.sh), so
# the cache stays as debootstrap left it. The mirror is the one apt uses on this host (deb.debian.org when
# none is found). DIR/.trun-ready holds "SUITE PACKAGE..."; an empty one is what scripts/chroot.sh wrote
# before this script existed: "trixie python3-torch".
# Exit codes: 0 ready, 1 debootstrap failed (its log: DIR.log), 2 bad usage.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: scripts/debroot.sh SUITE DIR [PACKAGE...]" >&2; exit 2; }
suite=$1 dir=$2
shift 2
want="$suite $*"
want=${want% }
if [ -x "$dir/usr/bin/env" ] && [ -f "$dir/.trun-ready" ]; then
  have=$(cat "$dir/.trun-ready")
  have=${have:-trixie python3-torch}
  [ "$have" = "$want" ] && exit 0
  echo "debroot: $dir was made as '$have', want '$want': rebuilding"
fi
command -v debootstrap >/dev/null || { echo "debroot: no debootstrap; run 'make deps' (Debian package debootstrap)" >&2; exit 1; }
mirror=$( (grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true) |
  grep -oE 'https?://[^ ]*debian/?' | grep -v -e security -e snapshot | head -n 1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
include=()
[ $# -eq 0 ] || include=("--include=$(IFS=,; echo "$*")")
echo "debroot: building $dir from $mirror ($suite minbase${*:+ + $*}; a minute or more)"
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
if ! debootstrap --variant=minbase "${include[@]}" "$suite" "$dir" "$mirror" >"$dir.log" 2>&1; then
  echo "debroot: debootstrap $suite into $dir failed, see $dir.log" >&2
  tail -n 20 "$dir.log" >&2
  exit 1
fi
rm -rf "$dir/var/cache/apt/archives/"*.deb
echo "$want" >"$dir/.trun-ready"
echo "debroot: ready at $dir"
