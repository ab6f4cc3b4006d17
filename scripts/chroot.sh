#!/usr/bin/env bash
# Builds the Debian trixie chroot with python3-torch (torch 2.6) used by the integration tests (scripts/debroot.sh),
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
if [ -f "$dir/.trun-ready" ] && [ ! -x "$dir/usr/bin/python3" ]; then rm -f "$dir/.trun-ready"; fi
"$here/debroot.sh" trixie "$dir" python3-torch || exit 1
[ -f "$dir/.trun-torch-patched" ] || patch_torch || exit 1
