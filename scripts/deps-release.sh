#!/usr/bin/env bash
# The packaging's tools and cached roots (`make deps`; tests 85-88): objdump, lintian and man from Debian,
# and three debootstrap roots under /var/cache/trun, built once per machine (scripts/debroot.sh):
#   bullseye-build  bullseye + the build packages of packaging/bullseye-build.list (make release builds there)
#   bullseye        plain bullseye minbase (glibc 2.31: the tarball's programs must start there)
#   bookworm-fresh  bookworm minbase + git make (a fresh Debian for the .deb; also `make check-fresh`'s)
# Exit codes: 0 ready, 1 a step failed (named).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/deps.sh" debootstrap binutils lintian man-db || exit 1
read -ra pkgs <"$here/../packaging/bullseye-build.list"
"$here/debroot.sh" bullseye /var/cache/trun/bullseye-build "${pkgs[@]}" || exit 1
"$here/debroot.sh" bullseye /var/cache/trun/bullseye || exit 1
"$here/debroot.sh" bookworm /var/cache/trun/bookworm-fresh git make || exit 1
