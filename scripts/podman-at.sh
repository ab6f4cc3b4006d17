#!/usr/bin/env bash
# Runs podman on a storage of its own, so that the tests (and make deps) never touch the machine's podman
# storage nor each other's: images and containers under DIR/root, its run state under DIR/run and DIR/tmp,
# its networks' CNI files under DIR/net; with RO_STORE (another such DIR), its images are usable read-only
# (the overlay driver's image store: the tests' offline base, imported once by make deps). Every podman that
# conmon starts later for the container's clean-up gets the same flags.
# Usage: scripts/podman-at.sh DIR [--image-store RO_STORE] PODMAN_ARGS...
# TRUN_PODMAN: the podman to run (default: the one on PATH); a wrapper named podman that calls this script
# sets it to the real one.
# Exit codes: podman's; 2 bad usage.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/podman-at.sh DIR [--image-store RO_STORE] PODMAN_ARGS..." >&2; exit 2; }
dir=$1
shift
opts=()
if [ "${1:-}" = --image-store ]; then
  [ $# -ge 2 ] || { echo "podman-at: --image-store needs a directory" >&2; exit 2; }
  opts=(--storage-opt "overlay.imagestore=$2/root")
  shift 2
fi
mkdir -p "$dir/root" "$dir/run" "$dir/tmp" "$dir/net"
exec "${TRUN_PODMAN:-podman}" --root "$dir/root" --runroot "$dir/run" --tmpdir "$dir/tmp" --network-config-dir "$dir/net" \
  --storage-driver overlay "${opts[@]}" "$@"
