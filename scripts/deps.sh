#!/usr/bin/env bash
# Installs Debian packages only where missing. Usage: scripts/deps.sh [PACKAGE...]
# Without arguments: what trun's build and tests need (`make deps`); `make bench-deps` names its own.
# Exit codes: 0 ok, 1 an install step failed.
set -euo pipefail

if [ $# -gt 0 ]; then
  want=("$@")
else
  want=(build-essential pkg-config libuv1-dev libyaml-dev libcurl4-openssl-dev check libjansson-dev
        python3-torch debootstrap clang libclang-rt-dev iproute2 procps psmisc)
fi
need=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq || { echo "deps: apt-get update failed; check network/apt sources" >&2; exit 1; }
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
    || { echo "deps: apt-get install ${need[*]} failed; install them by hand, then run make again" >&2; exit 1; }
fi
exit 0
