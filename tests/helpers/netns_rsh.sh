#!/bin/sh
# A stand-in for ssh in the --hostfile tests: netns_rsh.sh HOST WORD...
# HOST is looked up in $NETNS_RSH_MAP (lines "host namespace"); the WORDs are joined with spaces and run by a
# shell inside that network namespace, exactly as sshd runs what ssh sends (so trun's quoting is what is
# tested). `exec` all the way down: the remote trun agent is this very process and reads trun's stdin pipe
# itself (--watch-stdin: signals as lines, its end stops the agent), as it reads ssh's over real sshd
# (tests/integration/59-hostfile-ssh.sh).
host=$1
shift
ns=$(awk -v h="$host" '$1 == h { print $2; exit }' "${NETNS_RSH_MAP:?NETNS_RSH_MAP is not set}")
if [ -z "$ns" ]; then
  echo "netns_rsh.sh: unknown host '$host' (not in $NETNS_RSH_MAP)" >&2
  exit 255
fi
exec ip netns exec "$ns" /bin/sh -c "exec $*"
