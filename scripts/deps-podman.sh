#!/usr/bin/env bash
# What the container tests (tests/integration/77-79) and `make image` need, only where missing:
#   - Debian's podman, runc and catatonit (podman 4.3 on bookworm; catatonit is the pause process of the
#     pods `podman kube play` makes; crun is not installed: it refuses a hybrid cgroup layout such as this
#     kind of machine's);
#   - /etc/containers/containers.conf, written only where no containers.conf exists: default_ulimits = []
#     (podman's defaults raise RLIMIT_NOFILE / NPROC, which a root without CAP_SYS_RESOURCE may not: runc
#     then fails every start with "error setting rlimits") and runtime "runc";
#   - the tests' image store, TRUN_POD_STORE (default /var/cache/trun/podman), holding the offline torch base
#     localhost/trun-base:bookworm-torch (scripts/image-base.sh: debootstrap + python3-torch + podman import),
#     which every test uses read-only beside a storage of its own (scripts/podman-at.sh).
# Exit codes: 0 ready, 1 a step failed (named).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/deps.sh" podman runc catatonit || exit 1
conf=/etc/containers/containers.conf
if [ ! -e "$conf" ] && ! compgen -G "/etc/containers/containers.conf.d/*.conf" >/dev/null; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "deps-podman: writing $conf (default_ulimits = [], runtime runc)"
  $SUDO mkdir -p /etc/containers
  printf '%s\n' "# Written by trun's make deps (scripts/deps-podman.sh), where no containers.conf existed." \
    "[containers]" \
    "# podman's default ulimits raise RLIMIT_NOFILE and RLIMIT_NPROC: a root without CAP_SYS_RESOURCE may" \
    "# not, and runc then fails every start (\"error setting rlimits\"). Keep the engine's own limits." \
    "default_ulimits = []" "" "[engine]" \
    "# crun refuses hybrid cgroup v1/v2 layouts; runc runs there." 'runtime = "runc"' |
    $SUDO tee "$conf" >/dev/null || { echo "deps-podman: cannot write $conf" >&2; exit 1; }
fi
store=${TRUN_POD_STORE:-/var/cache/trun/podman}
# podman's overlay storage cannot live on an overlay file system (make check-fresh's root, a container's /):
# there the store is a tmpfs for as long as this mount namespace lives.
mkdir -p "$store"
if [ "$(stat -f -c %T "$store")" = overlayfs ]; then
  echo "deps-podman: $store is on an overlay file system: mounting a tmpfs there for podman's overlay storage"
  mount -t tmpfs -o mode=700,size=8g trun-podman "$store" || { echo "deps-podman: cannot mount a tmpfs at $store" >&2; exit 1; }
fi
# image-base.sh calls `podman`: here, the one on the tests' image store.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
printf '#!/bin/sh\nTRUN_PODMAN=%q exec %q %q "$@"\n' "$(command -v podman)" "$here/podman-at.sh" "$store" >"$bin/podman"
chmod +x "$bin/podman"
PATH=$bin:$PATH TRUN_CONTAINER_ENGINE=podman "$here/image-base.sh" localhost/trun-base:bookworm-torch || exit 1
