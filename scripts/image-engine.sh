#!/usr/bin/env bash
# Prints the container engine `make image` and scripts/image-base.sh use: $TRUN_CONTAINER_ENGINE when set,
# else podman when it is on PATH, else docker when its daemon answers. Usage: scripts/image-engine.sh
# Exit codes: 0 found (its name on stdout), 1 none (the fix on stderr).
set -euo pipefail
if [ -n "${TRUN_CONTAINER_ENGINE:-}" ]; then
  command -v "$TRUN_CONTAINER_ENGINE" >/dev/null ||
    { echo "image: TRUN_CONTAINER_ENGINE=$TRUN_CONTAINER_ENGINE is not on PATH" >&2; exit 1; }
  echo "$TRUN_CONTAINER_ENGINE"
elif command -v podman >/dev/null; then
  echo podman
elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  echo docker
else
  echo "image: no container engine: neither podman nor a docker whose daemon answers; 'make deps' installs" \
    "Debian's podman and runc (or set TRUN_CONTAINER_ENGINE)" >&2
  exit 1
fi
