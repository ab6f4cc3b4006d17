#!/usr/bin/env bash
# Installs what trun's build and tests need, only where missing.
# Exit codes: 0 ok, 1 an install step failed.
set -euo pipefail

need=()
for p in build-essential pkg-config libuv1-dev libyaml-dev libcurl4-openssl-dev check \
         libjansson-dev python3-torch debootstrap clang libclang-rt-dev iproute2 procps psmisc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq || { echo "deps: apt-get update failed; check network/apt sources" >&2; exit 1; }
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
    || { echo "deps: apt-get install ${need[*]} failed" >&2; exit 1; }
fi
exit 0
