#!/usr/bin/env bash
# `make image`: builds the trun image (packaging/container/Containerfile) with podman, else docker
# (scripts/image-engine.sh), from the release tarball and examples/, on BASE, tagged IMAGE. The default BASE,
# localhost/trun-base:bookworm-torch, is made offline when missing (scripts/image-base.sh); any other is
# the engine's to find or pull. The build context is a directory of its own holding only dist/ (the
# tarball) and examples/, the two things the Containerfile copies.
# Usage: scripts/image.sh BASE IMAGE VERSION
# Exit codes: 0 built, 1 a step failed (named), 2 bad usage.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: scripts/image.sh BASE IMAGE VERSION" >&2; exit 2; }
base=$1 image=$2 version=$3
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
engine=$("$here/image-engine.sh") || exit 1
tarball=$top/dist/trun-$version-linux-x86_64.tar.gz
[ -f "$tarball" ] || { echo "image: no $tarball: run 'make release' ('make image' does)" >&2; exit 1; }
if [ "$base" = localhost/trun-base:bookworm-torch ]; then
  "$here/image-base.sh" "$base" || exit 1
fi
ctx=$(mktemp -d "${TMPDIR:-/tmp}/trun-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
mkdir "$ctx/dist"
cp "$tarball" "$ctx/dist/"
cp -r "$top/examples" "$ctx/examples"
t0=$(date +%s.%N)
# --network none: the one RUN step (trun --version) needs none, and no bridge is set up for it.
if ! "$engine" build --network none -f "$top/packaging/container/Containerfile" --build-arg "BASE=$base" \
  --build-arg "VERSION=$version" -t "$image" "$ctx" >"$ctx/build.log" 2>&1; then
  cat "$ctx/build.log" >&2
  echo "image: $engine build of $image on $base failed (output above); a base the engine cannot find or pull" \
    "offline fails here: build it, or give BASE=<an image with python3 and torch>" >&2
  exit 1
fi
size=$("$engine" image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}')
echo "image: $image built with $engine on $base in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s ($size): $(grep -m1 '^trun ' "$ctx/build.log" || echo '?')"
