#!/usr/bin/env bash
# Real sshd "hosts" on one box (Debian's openssh-server), for the --hostfile tests.
#
#   tests/helpers/ssh_hosts.sh [--hosts N] [--net A.B.C] CMD [ARG...]
#
# Starts one OpenSSH sshd in each of N network + UTS namespaces h1..hN (A.B.C.11.., port 22, host keys made
# here), with root's key login set up the way a user sets it up (~/.ssh/id_ed25519, authorized_keys,
# known_hosts with the hosts' keys, so that plain `ssh -o BatchMode=yes hK` works), checks that every host
# answers, runs CMD on the launching host "login" (A.B.C.1), then tears everything down and exits with CMD's
# status. Defaults: 3 hosts, 10.254.0. `tests/helpers/ssh_hosts.sh bash` is a shell on the login host.
#
# The sandbox (tests/helpers/sandbox_lib.sh) ends with this script, however it ends: no sshd can be left. Root's
# home is a private directory there (a private /etc/passwd names it; /etc/shadow too if root's account is
# locked), so neither the machine's ~/.ssh nor its ~/.bashrc play a part, and /etc/hosts names the hosts.
# The sessions' environment comes from ~/.ssh/environment (sshd's PermitUserEnvironment): the variables named
# in SSH_HOSTS_ENV (e.g. "PYTHON_EXEC TMPDIR TRUN_TEST_MARKER") with their values here.
#
# CMD's environment: SSH_HOSTS ("h1 h2 h3"), SSH_HOSTS_NET (A.B.C), SSH_HOSTS_STATE (keys, sshd configs, logs),
# and on PATH: ssh-host-down hK (stops hK's sshd: new connections are refused; sessions stay).
# `ip netns pids hK` lists the processes of host hK.
# Exit: CMD's status; 77 (reason on stderr) where namespaces, veth pairs or bridges cannot be made; 1 when a
# tool is missing (the deps step installs openssh-server and openssh-client) or a host does not answer.
set -euo pipefail

hosts=3 net=10.254.0
while [ $# -gt 0 ]; do
  case $1 in
  --hosts) hosts=$2; shift 2 ;;
  --net) net=$2; shift 2 ;;
  --) shift; break ;;
  -*) echo "ssh_hosts.sh: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: ssh_hosts.sh [--hosts N] [--net A.B.C] CMD [ARG...]" >&2; exit 2; }

SB_NAME=ssh_hosts
. "$(dirname "$0")/sandbox_lib.sh"
sandbox_need "openssh-server, openssh-client, iproute2" /usr/sbin/sshd ssh ssh-keygen ip unshare nsenter
sandbox_enter "$0" --hosts "$hosts" --net "$net" -- "$@"

# ---- inside: PID 1 of the sandbox, host "login" ------------------------------------------------------------
state=/run/trun-ssh
home=/run/trun-ssh-home
names=()
for ((i = 1; i <= hosts; i++)); do names+=("h$i"); done
pids_sshd=()

sandbox_init "$net" login
for ((i = 1; i <= hosts; i++)); do sandbox_host "h$i" "$net.$((10 + i))"; done
mkdir -p "$state/etc" "$state/logs" "$home/.ssh"
mkdir -m 755 /run/sshd # sshd's privilege separation directory
chmod 700 "$home" "$home/.ssh"

{ cat /etc/hosts; echo "# trun ssh test hosts"; echo "$net.1 login"
  for ((i = 1; i <= hosts; i++)); do echo "$net.$((10 + i)) h$i"; done; } >"$state/etc/hosts"
sandbox_etc hosts "$state/etc/hosts"
# Root's home: this private directory (sshd and ssh both read ~/.ssh of the passwd entry).
awk -F: -v OFS=: -v h="$home" '$1 == "root" { $6 = h } 1' /etc/passwd >"$state/etc/passwd"
sandbox_etc passwd "$state/etc/passwd"
if [ -r /etc/shadow ] && awk -F: '$1 == "root" && $2 ~ /^!/ { f = 1 } END { exit !f }' /etc/shadow; then
  # sshd without PAM refuses a locked account even for key logins: unlock it here only.
  awk -F: -v OFS=: '$1 == "root" { $2 = "*" } 1' /etc/shadow >"$state/etc/shadow"
  chmod 600 "$state/etc/shadow"
  sandbox_etc shadow "$state/etc/shadow"
fi

# Keys: the user's, and one per host (known_hosts lists them under the host's name and address).
ssh-keygen -q -t ed25519 -N '' -C "trun-test@login" -f "$home/.ssh/id_ed25519" || sb_die "ssh-keygen (user key)"
cp "$home/.ssh/id_ed25519.pub" "$home/.ssh/authorized_keys"
: >"$home/.ssh/known_hosts"
for n in "${names[@]}"; do
  ssh-keygen -q -t ed25519 -N '' -C "$n" -f "$state/$n.host_key" || sb_die "ssh-keygen (host key of $n)"
  echo "$n,$net.$((10 + ${n#h})) $(cut -d' ' -f1,2 "$state/$n.host_key.pub")" >>"$home/.ssh/known_hosts"
done
: >"$home/.ssh/environment"
for v in ${SSH_HOSTS_ENV:-}; do
  [ -n "${!v+x}" ] && echo "$v=${!v}" >>"$home/.ssh/environment"
done
chmod 600 "$home/.ssh/authorized_keys" "$home/.ssh/environment"

permit_env=no
[ -z "${SSH_HOSTS_ENV:-}" ] || permit_env=$(echo $SSH_HOSTS_ENV | tr ' ' ',')
for n in "${names[@]}"; do
  cat >"$state/$n.sshd_config" <<EOF
# sshd of test host $n (tests/helpers/ssh_hosts.sh)
ListenAddress $net.$((10 + ${n#h})):22
HostKey $state/$n.host_key
PidFile $state/$n.sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile .ssh/authorized_keys
UsePAM no
PermitUserEnvironment $permit_env
X11Forwarding no
PrintMotd no
LogLevel VERBOSE
EOF
done

mkdir -p "$state/bin"
cat >"$state/bin/ssh-host-down" <<EOS
#!/bin/sh
# ssh-host-down HOST: stops HOST's sshd listener (new connections are refused; running sessions stay).
n=\${1:?usage: ssh-host-down HOST}
kill -TERM "\$(cat "$state/\$n.sshd.pid")"
EOS
chmod +x "$state/bin/ssh-host-down"

teardown() {
  local rc=$? p
  trap - EXIT INT TERM
  for p in "${pids_sshd[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    for n in "${names[@]}"; do
      [ -f "$state/logs/$n.sshd.log" ] || continue
      echo "---- last lines of $n's sshd log ----" >&2
      tail -n 15 "$state/logs/$n.sshd.log" >&2
    done
  fi
  sandbox_down # everything else dies with the sandbox's PID namespace
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for n in "${names[@]}"; do
  sandbox_in "$n" /usr/sbin/sshd -D -e -f "$state/$n.sshd_config" >>"$state/logs/$n.sshd.log" 2>&1 &
  pids_sshd+=($!)
done
t0=$(date +%s)
for n in "${names[@]}"; do
  until out=$(ssh -o BatchMode=yes -o ConnectTimeout=2 "$n" hostname 2>&1) && [ "$out" = "$n" ]; do
    [ $(($(date +%s) - t0)) -lt 30 ] || sb_die "host $n does not answer ssh within 30 s: $out"
    sleep 0.2
  done
done
sb_say "up in $(($(date +%s) - t0)) s: login $net.1, sshd on ${names[*]} ($net.11..)"

export SSH_HOSTS="${names[*]}" SSH_HOSTS_NET=$net SSH_HOSTS_STATE=$state
export PATH=$state/bin:$PATH
set +e
"$@"
rc=$?
set -e
exit $rc
