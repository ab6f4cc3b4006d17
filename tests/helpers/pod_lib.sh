# Shared by the container tests (tests/integration/77-79): trun's image (`make image`) run by Debian's podman
# and runc as root. Each test has a podman storage of its own (scripts/podman-at.sh, under /var/tmp) that
# sees the tests' image store read-only, where `make deps` imported the offline torch base
# (scripts/deps-podman.sh); and a CNI bridge network of its own with no DNS and no gateway (containers reach
# each other by address only, like pods without a headless Service; nothing leaves the bridge). Source it
# after mn_lib.sh and call pod_setup NN: it sets the test's EXIT trap to pod_cleanup, which removes the
# containers, pods, the network, its bridge, the storage and $tmp, whatever state the test stopped in.
# A runtime that cannot start a container is a failure (make deps installs and sets it up), never a skip.
pod_store=${TRUN_POD_STORE:-/var/cache/trun/podman}
pod_base=localhost/trun-base:bookworm-torch
pod_image=localhost/trun-test:$$
pod_dir=""

# pod_setup NN: the storage, the `podman` wrapper first on PATH (make image uses it too), the network.
# Sets tmp (a scratch directory), pod_dir, pod_net, pod_bridge, pod_prefix (the subnet's first three octets),
# pod_out (a directory the containers see at /out if they mount it).
pod_setup() {
  local nn=$1
  trap pod_cleanup EXIT
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-$nn.XXXXXX")
  need_cmd podman podman
  need_cmd runc runc
  [ "$(id -u)" = 0 ] || fail "the container tests run podman as root (CI runs make check as root)"
  pod_dir=$(mktemp -d "/var/tmp/trun-pod$nn.XXXXXX")
  # podman's overlay storage cannot live on an overlay file system (make check-fresh's root): a tmpfs there.
  if [ "$(stat -f -c %T "$pod_dir")" = overlayfs ]; then
    mount -t tmpfs -o mode=700,size=4g "trun-pod$nn" "$pod_dir" || fail "cannot mount a tmpfs at $pod_dir"
  fi
  mkdir -p "$pod_dir/bin" "$pod_dir/out"
  chmod 777 "$pod_dir/out"
  pod_out=$pod_dir/out
  printf '#!/bin/sh\nTRUN_PODMAN=%q exec %q %q --image-store %q "$@"\n' "$(command -v podman)" \
    "$TRUN_REPO/scripts/podman-at.sh" "$pod_dir/store" "$pod_store" >"$pod_dir/bin/podman"
  chmod +x "$pod_dir/bin/podman"
  export PATH=$pod_dir/bin:$PATH
  podman image exists "$pod_base" ||
    fail "no $pod_base in the tests' image store $pod_store: the deps step imports it (run 'make deps': scripts/deps-podman.sh)"
  # The bridge has no address on this host (no gateway), so its subnet meets no route here and two tests'
  # subnets may even be equal; bridge names have at most 15 characters.
  pod_net=trun$nn-$$
  pod_bridge=tp$nn$$
  pod_prefix=10.$((160 + $$ % 64)).$(($$ / 64 % 250 + 1))
  mkdir -p "$pod_dir/store/net"
  cat >"$pod_dir/store/net/$pod_net.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$pod_net",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$pod_bridge",
      "isGateway": false,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_prefix.0/24"}]]},
      "capabilities": {"ips": true}
    }
  ]
}
EOF
  podman network inspect "$pod_net" >/dev/null || fail "podman does not read the network $pod_net ($pod_dir/store/net)"
  note "podman storage $pod_dir/store (base from $pod_store), network $pod_net: $pod_prefix.0/24 on bridge $pod_bridge"
}

pod_cleanup() {
  [ -n "${KEEP_TMP:-}" ] || rm -rf "${tmp:-}"
  [ -n "$pod_dir" ] && [ -d "$pod_dir" ] || return 0
  podman pod rm -af -t 0 >/dev/null 2>&1
  podman rm -af -t 0 >/dev/null 2>&1
  podman network rm -f "$pod_net" >/dev/null 2>&1
  ip link del "$pod_bridge" 2>/dev/null
  rm -rf "/var/lib/cni/networks/$pod_net"
  # Mounts a failed clean-up may leave (the overlay of a container, its shm).
  awk -v d="$pod_dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
  rm -rf "$pod_dir"/* 2>/dev/null
  ! mountpoint -q "$pod_dir" || umount -l "$pod_dir"
  rm -rf "$pod_dir"
}

# pod_build: `make image` onto the offline base, tagged $pod_image, in this test's storage (offline: the
# base is local and nothing is pulled). Prints what make image said.
pod_build() {
  make -C "$TRUN_REPO" --no-print-directory B="$TRUN_BUILD" image BASE="$pod_base" IMAGE="$pod_image" \
    >"$pod_dir/image.log" 2>&1 || { cat "$pod_dir/image.log"; fail "make image BASE=$pod_base IMAGE=$pod_image failed"; }
  grep '^image:' "$pod_dir/image.log" || true
}

# pod_exit NAME: the container's exit code (after it stopped).
pod_exit() { podman inspect --format '{{.State.ExitCode}}' "$1"; }
# pod_running NAME: 0 while the container runs.
pod_running() { [ "$(podman inspect --format '{{.State.Running}}' "$1" 2>/dev/null)" = true ]; }
# pod_wait NAME LIMIT_S: waits for the container to stop (a safety limit, not a timing assertion); 1 past it.
pod_wait() { wait_for "! pod_running $1" "$2"; }
# pod_logs NAME: its output (stdout and stderr), for the test's log.
pod_logs() { echo "=== container $1:"; podman logs "$1" 2>&1; echo "=== end of $1"; }
