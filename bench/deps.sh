#!/usr/bin/env bash
# What `make bench` needs beyond `make deps`: matplotlib for bench/plots.py, from Debian, only where missing.
# Exit codes: 0 ok, 1 the install failed.
set -euo pipefail
need=()
for p in python3-matplotlib; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0
echo "bench-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq || { echo "bench-deps: apt-get update failed; check network/apt sources" >&2; exit 1; }
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
  || { echo "bench-deps: apt-get install ${need[*]} failed; install it by hand, then run make bench again" >&2; exit 1; }
