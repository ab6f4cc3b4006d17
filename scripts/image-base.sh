#!/usr/bin/env bash
# Builds the offline torch base image, made without any registry: a Debian bookworm minbase root with Debian's
# python3-torch (torch 1.13; scripts/debroot.sh, cached at /var/cache/trun/bookworm-torch) imported with
# `podman import` (or `docker import`) as IMAGE (default localhost/trun-base:bookworm-torch). It is the
# BASE `make image` uses when none is given, and the containers' base in the tests (make deps imports it into
# the tests' image store, TRUN_POD_STORE). Nothing is done when IMAGE exists and was imported from the
# root as it is now (the label trun.root holds the root's stamp).
# Usage: scripts/image-base.sh [IMAGE]      (the engine: podman, else docker; TRUN_CONTAINER_ENGINE picks one)
# Exit codes: 0 ready, 1 a step failed (named), 2 bad usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
image=${1:-localhost/trun-base:bookworm-torch}
[ $# -le 1 ] || { echo "usage: scripts/image-base.sh [IMAGE]" >&2; exit 2; }
root=${TRUN_BASE_ROOT:-/var/cache/trun/bookworm-torch}
engine=$("$here/image-engine.sh") || exit 1

"$here/debroot.sh" bookworm "$root" python3-torch || exit 1
stamp="$(cat "$root/.trun-ready") $(stat -c %Y "$root/.trun-ready")"
have=$("$engine" image inspect --format '{{ index .Config.Labels "trun.root" }}' "$image" 2>/dev/null || true)
if [ "$have" = "$stamp" ]; then
  exit 0
fi
echo "image-base: importing $root as $image ($engine import; half a minute)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The apt lists, documentation and translations are left out (150 MiB): the image is run, not upgraded.
if ! tar -C "$root" --numeric-owner --exclude=./.trun-ready --exclude=./var/lib/apt/lists \
  --exclude=./usr/share/doc --exclude=./usr/share/man --exclude=./usr/share/locale -cf - . |
  "$engine" import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' --change "LABEL trun.root=\"$stamp\"" \
    - "$image" >"$log" 2>&1; then
  cat "$log" >&2
  echo "image-base: $engine import of $root as $image failed (output above); see 'make deps' for the engine's setup" >&2
  exit 1
fi
echo "image-base: $image ready ($("$engine" image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}'))"
