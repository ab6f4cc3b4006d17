#!/usr/bin/env bash
# Builds the Debian trixie chroot with python3-torch (torch 2.6) used by the integration tests,
# when it is missing. Usage: scripts/chroot.sh [DIR]   (default $TRUN_CHROOT or /var/cache/trun/trixie)
# Exit codes: 0 ready, 1 build failed.
set -euo pipefail
dir=${1:-${TRUN_CHROOT:-/var/cache/trun/trixie}}
if [ -x "$dir/usr/bin/python3" ] && [ -f "$dir/.trun-ready" ]; then
  exit 0
fi
mirror=$( (grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true) \
         | grep -oE 'https?://[^ ]*debian/?' | grep -v -e security -e snapshot | head -n 1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
echo "chroot: building $dir from $mirror (trixie, python3-torch; about 2 minutes)"
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
if ! debootstrap --variant=minbase --include=python3-torch trixie "$dir" "$mirror" >"$dir.log" 2>&1; then
  echo "chroot: debootstrap failed, see $dir.log" >&2
  tail -n 20 "$dir.log" >&2
  exit 1
fi
rm -rf "$dir/var/cache/apt/archives/"*.deb
touch "$dir/.trun-ready"
echo "chroot: ready at $dir"
