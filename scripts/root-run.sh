#!/usr/bin/env bash
# Runs a command as root inside a throwaway copy of a cached Debian root (scripts/debroot.sh), as on a fresh
# machine: an overlay mount over ROOT (so the root is a mount point and the cache stays untouched; what the
# command writes is gone afterwards), its own PID, mount and UTS namespaces (every process it leaves is
# killed when it ends), the host's /dev and /sys (cgroups included), a fresh /proc, /run and /dev/shm, the
# host's network, DNS settings and CA bundle, the host name NAME and a standard Debian /etc/hosts
# ("127.0.1.1 NAME", as Debian's and Ubuntu's installers write it).
# The root is pivot_root'ed to (not chroot'ed): tools that join its mount namespace (runc exec) stay inside it.
# Usage: scripts/root-run.sh [--hostname NAME] [--bind SRC:DST]... [--keep-upper DIR] ROOT CMD [ARGS...]
#   --bind        bind-mounts host path SRC at DST inside the root (DST is created)
#   --keep-upper  keeps the overlay's upper layer (what the command changed) in DIR instead of deleting it
# The environment is cleared but for PATH, HOME=/root, LANG=C.UTF-8, TERM, CI and the variables that point
# clients at the CA bundle (NODE_EXTRA_CA_CERTS, SSL_CERT_FILE, ...: this workplace's proxy signs with its own CA).
# Exit codes: the command's; 2 bad usage; 125 the root or a mount could not be set up (named on stderr).
set -euo pipefail
name=trun-fresh
binds=()
keep=""
while [ $# -gt 0 ]; do
  case $1 in
    --hostname) name=$2; shift 2 ;;
    --bind) binds+=("$2"); shift 2 ;;
    --keep-upper) keep=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "root-run: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "usage: scripts/root-run.sh [--hostname NAME] [--bind SRC:DST]... ROOT CMD [ARGS...]" >&2; exit 2; }
root=$(cd "$1" 2>/dev/null && pwd) || { echo "root-run: no root at '$1'; build it with scripts/debroot.sh" >&2; exit 125; }
shift
[ -x "$root/usr/bin/env" ] || { echo "root-run: $root is not a Debian root (no usr/bin/env); build it with scripts/debroot.sh" >&2; exit 125; }
[ "$(id -u)" = 0 ] || { echo "root-run: needs root (mount and PID namespaces)" >&2; exit 125; }
for b in "${binds[@]}"; do
  [ -e "${b%%:*}" ] || { echo "root-run: --bind source '${b%%:*}' does not exist" >&2; exit 2; }
done

# The overlay's upper and work directories must be on a real file system (not an overlay, not tmpfs for
# big installs): /var/tmp.
state=$(mktemp -d /var/tmp/trun-root.XXXXXX)
cleanup() { [ -n "$keep" ] && { mkdir -p "$keep"; cp -a "$state/upper/." "$keep/"; }; rm -rf "$state"; }
trap cleanup EXIT
mkdir -p "$state/upper" "$state/work" "$state/merged"
# Inside another overlay (make check-fresh runs make check in one) an upper layer cannot live there: the
# command's changes then go to a tmpfs (mounted below, in the namespace), which --keep-upper cannot keep.
if [ "$(stat -f -c %T "$state")" = overlayfs ] && [ -n "$keep" ]; then
  echo "root-run: --keep-upper needs /var/tmp on a real file system, not an overlay" >&2
  exit 125
fi

rc=0
unshare --mount --uts --pid --fork --propagation private -- /bin/bash -euo pipefail -c '
  root=$1 state=$2 name=$3; shift 3
  binds=(); while [ "$1" != "--" ]; do binds+=("$1"); shift; done; shift
  m=$state/merged
  die() { echo "root-run: $*" >&2; exit 125; }
  if [ "$(stat -f -c %T "$state")" = overlayfs ]; then
    mount -t tmpfs -o mode=700 trun-upper "$state" || die "cannot mount a tmpfs for the upper layer at $state"
    mkdir -p "$state/upper" "$state/work" "$m"
  fi
  mount -t overlay trun-root -o "lowerdir=$root,upperdir=$state/upper,workdir=$state/work" "$m" ||
    die "cannot mount an overlay over $root (kernel without overlayfs?)"
  mount -t proc proc "$m/proc" || die "mount proc"
  mount --rbind /sys "$m/sys" || die "bind /sys"
  mount --rbind /dev "$m/dev" || die "bind /dev"
  mount -t tmpfs -o mode=1777 shm "$m/dev/shm" || die "tmpfs /dev/shm"
  mount -t tmpfs -o mode=755 run "$m/run" || die "tmpfs /run"
  mkdir -p "$m/run/lock" "$m/etc/ssl/certs"
  hostname "$name" || die "cannot set the host name"
  echo "$name" >"$m/etc/hostname"
  printf "127.0.0.1\tlocalhost\n127.0.1.1\t%s\n\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n" \
    "$name" >"$m/etc/hosts"
  cp -L /etc/resolv.conf "$m/etc/resolv.conf" 2>/dev/null || true
  # The host CA bundle: as the bundle itself, and as a local CA file, so that it survives the
  # update-ca-certificates run of a later ca-certificates install.
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp -L /etc/ssl/certs/ca-certificates.crt "$m/etc/ssl/certs/"
    mkdir -p "$m/usr/local/share/ca-certificates"
    cp -L /etc/ssl/certs/ca-certificates.crt "$m/usr/local/share/ca-certificates/host-bundle.crt"
  fi
  for b in "${binds[@]}"; do
    src=${b%%:*} dst=${b#*:}
    mkdir -p "$m$dst"
    mount --rbind "$src" "$m$dst" || die "bind $src at $dst"
  done
  # Not exec (the "|| exit" below keeps bash from running its last command by exec): this shell stays PID 1 of the
  # namespace and reaps orphans while the command runs.
  # Clients that take the CA bundle from the environment (node and npm, curl, git, Python) keep doing so.
  ca=()
  for v in NODE_EXTRA_CA_CERTS SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE REQUESTS_CA_BUNDLE GIT_SSL_CAINFO PIP_CERT; do
    [ -n "${!v:-}" ] && [ -e "$m${!v}" ] && ca+=("$v=${!v}")
  done
  # pivot_root, not chroot: the root becomes the mount namespace'"'"'s own root. Under a chroot the namespace'"'"'s
  # root stays the host'"'"'s, and whatever joins a mount namespace made from here (setns: nsenter -m, runc exec,
  # podman exec) lands in the host'"'"'s / and sees the host'"'"'s /proc. The old root, stacked over the new one by
  # `pivot_root . .`, is then detached.
  cd "$m" || die "cd $m"
  pivot_root . . || die "pivot_root into $m"
  umount -l . || die "cannot detach the host root after pivot_root"
  cd /
  /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" ${CI:+CI=$CI} "${ca[@]}" "$@" || exit $?
' root-run "$root" "$state" "$name" "${binds[@]}" -- "$@" || rc=$?
exit $rc
