# A sandbox for tests that run real daemons (tests/helpers/slurm_cluster.sh, tests/helpers/ssh_hosts.sh): the
# calling script re-executes itself as PID 1 of new PID, mount, UTS and network namespaces, so that the kernel
# kills every process it started (daemons included) when it ends, however it ends (unshare --kill-child: also
# when the caller is SIGKILLed). Inside, /run is a private tmpfs (sockets, pid files, state, /run/netns: the
# "hosts" vanish with it) and /etc files are replaced by private bind mounts: nothing of the machine changes,
# and two clones can run at once. Sourced; bash.
#   sandbox_need PACKAGES TOOL...  outside: exit 1 naming the missing TOOL (a command, or a path) and the
#                                  Debian PACKAGES that `make deps` installs for it
#   sandbox_enter SCRIPT ARGS...   outside: checks root and namespaces (exit 77 with a reason where refused),
#                                  then execs SCRIPT ARGS as PID 1 of the sandbox; inside: returns
#   sandbox_init NET NAME          inside: /run private, this namespace is host NAME = NET.1/24 on a bridge
#                                  that lives in a namespace of its own ("br")
#   sandbox_host NAME ADDR         a network namespace NAME (/run/netns/NAME) with eth0 = ADDR/24 on the bridge
#   sandbox_etc FILE CONTENT_FILE  bind-mounts CONTENT_FILE over /etc/FILE (private to the sandbox)
#   sandbox_in NAME CMD...         runs CMD in host NAME's network namespace with its own UTS namespace and
#                                  host name NAME (exec: CMD keeps the pid)
#   sandbox_down                   deletes the host namespaces (the rest goes with the sandbox)
sb_say() { echo "${SB_NAME:-sandbox}: $*" >&2; }
sb_die() { sb_say "error: $*"; exit 1; }
SB_HOSTS=()

sandbox_need() { # PACKAGES TOOL...
  local pkgs=$1 t
  shift
  [ "${TRUN_SANDBOX:-}" = 1 ] && [ $$ = 1 ] && return 0
  for t in "$@"; do
    case $t in
    /*) [ -x "$t" ] ;;
    *) command -v "$t" >/dev/null ;;
    esac || sb_die "'$t' is missing: run 'make deps' (installs $pkgs)"
  done
}

sandbox_enter() {
  local script=$1
  shift
  # Inside: PID 1 of the new PID namespace (the variable alone could be inherited from an outer sandbox).
  [ "${TRUN_SANDBOX:-}" = 1 ] && [ $$ = 1 ] && return 0
  [ "$(id -u)" = 0 ] || { sb_say "needs root (namespaces, daemons)"; exit 77; }
  local err
  err=$(unshare --pid --fork --mount --uts --net true 2>&1) || { sb_say "cannot create namespaces: $err"; exit 77; }
  exec unshare --pid --fork --kill-child=KILL --mount --uts --net --propagation private --mount-proc \
    env TRUN_SANDBOX=1 bash "$script" "$@"
}

sandbox_init() { # NET NAME
  mount -t tmpfs -o mode=755 trun-sandbox-run /run || { sb_say "cannot mount a private tmpfs on /run"; exit 1; }
  mkdir -p /run/netns
  hostname "$2"
  ip link set lo up
  ip netns add br || { sb_say "cannot create a network namespace"; exit 77; }
  ip -n br link set lo up
  ip -n br link add br0 type bridge || { sb_say "cannot create a bridge in a network namespace"; exit 77; }
  ip -n br link set br0 up
  sb_veth eth0 vb0 ""
  ip addr add "$1.1/24" dev eth0
  ip link set eth0 up
}

sb_veth() { # NAME-IN-NS BRIDGE-PORT NS("" = this one): a veth pair from NS to the bridge
  local ns_args=()
  [ -n "$3" ] && ns_args=(-n "$3")
  ip "${ns_args[@]}" link add "$1" type veth peer name "$2" netns br || { sb_say "cannot create veth pairs"; exit 77; }
  ip -n br link set "$2" master br0
  ip -n br link set "$2" up
}

sandbox_host() { # NAME ADDR
  ip netns add "$1" || { sb_say "cannot create network namespace $1"; exit 1; }
  SB_HOSTS+=("$1")
  ip -n "$1" link set lo up
  sb_veth eth0 "v${#SB_HOSTS[@]}" "$1"
  ip -n "$1" addr add "$2/24" dev eth0
  ip -n "$1" link set eth0 up
}

sandbox_etc() { # FILE CONTENT_FILE
  [ -e "/etc/$1" ] || { sb_say "/etc/$1 does not exist (is the package that owns it installed? run 'make deps')"; exit 1; }
  mount --bind "$2" "/etc/$1" || { sb_say "cannot bind-mount the sandbox's /etc/$1"; exit 1; }
}

sandbox_in() { # NAME CMD...
  local n=$1
  shift
  exec nsenter --net=/run/netns/"$n" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$n" "$@"
}

sandbox_down() {
  local n
  for n in "${SB_HOSTS[@]}" br; do ip netns del "$n" 2>/dev/null || true; done
  SB_HOSTS=()
}
