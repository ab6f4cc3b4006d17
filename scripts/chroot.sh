#!/usr/bin/env bash
# Builds the Debian trixie chroot with python3-torch (torch 2.6) used by the integration tests,
# when it is missing. Usage: scripts/chroot.sh [DIR]   (default $TRUN_CHROOT or /var/cache/trun/trixie)
# Exit codes: 0 ready, 1 build failed.
set -euo pipefail
dir=${1:-${TRUN_CHROOT:-/var/cache/trun/trixie}}
here=$(cd "$(dirname "$0")" && pwd)
patch_torch() {
  # Debian's torch 2.6 lacks libuv: make every TCPStore(...) honour USE_LIBUV=0 (see the script).
  cp "$here/chroot-patch-torch.py" "$dir/tmp/chroot-patch-torch.py"
  chroot "$dir" /usr/bin/python3 /tmp/chroot-patch-torch.py >"$dir.patch.log" 2>&1 \
    || { echo "chroot: patching torch failed, see $dir.patch.log" >&2; return 1; }
  find "$dir/usr/lib/python3/dist-packages/torch/distributed" -name '__pycache__' -prune -exec rm -rf {} +
  touch "$dir/.trun-torch-patched"
}
if [ -x "$dir/usr/bin/python3" ] && [ -f "$dir/.trun-ready" ]; then
  [ -f "$dir/.trun-torch-patched" ] || patch_torch || exit 1
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
patch_torch || exit 1
touch "$dir/.trun-ready"
echo "chroot: ready at $dir"
