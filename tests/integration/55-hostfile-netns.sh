#!/usr/bin/env bash
# trun --hostfile across 3 "hosts" = 3 network namespaces (10.251.0.1..3 on a bridge, tests/helpers/netns_lib.sh).
# --rsh is tests/helpers/netns_rsh.sh, which runs the remote words through a shell in the host's namespace the
# way sshd does (so trun's quoting is exercised: the output directory has a space and a quote in its name).
#   1. 3 nodes x 2 workers (slots=2) gloo all-reduce (tests/helpers/allreduce.py, torch 1.13): exit 0, every
#      rank's result, each line of output prefixed with the host it ran on ([10.251.0.N] [defaultL]:rank R).
#   2. rank 3 fails with exit code 7: trun exits with the agents' failure code (1), node 0's report (with the
#      [10.251.0.1] prefix) names rank 3 and exit code 7.
#   3. SIGINT to trun while every rank trains (tests/helpers/loop_worker.py): it reaches every remote agent as a
#      line on its stdin (--watch-stdin), trun exits 1 and no process of the job is left (TRUN_TEST_MARKER).
# tests/integration/59-hostfile-ssh.sh runs the same launcher over real sshd.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
. "$TRUN_REPO/tests/helpers/netns_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-55.XXXXXX")
launcher=""
cleanup() {
  kill_marked
  [ -n "$launcher" ] && wait "$launcher" 2>/dev/null
  netns_down
  rm -rf "$tmp"
}
trap cleanup EXIT

netns_up 10.251.0 3
export NETNS_RSH_MAP=$tmp/map
export GLOO_SOCKET_IFNAME=eth0 # gloo would take the host name's address (the same in every namespace)
for i in 0 1 2; do echo "10.251.0.$((i + 1)) ${NS_HOSTS[$i]}"; done >"$NETNS_RSH_MAP"
cat >"$tmp/hosts" <<'HOSTS'
# 3 hosts, 2 workers each (DeepSpeed's hostfile format)
10.251.0.1 slots=2

10.251.0.2 slots=2   # node rank 1
10.251.0.3   slots=2
HOSTS
rsh=$TRUN_REPO/tests/helpers/netns_rsh.sh
note "marker $MARKER; namespaces ${NS_HOSTS[*]} via $NS_BR"

echo "=== dry run"
"$TRUN" --hostfile "$tmp/hosts" --rsh "$rsh" --dry-run "$TRUN_REPO/tests/helpers/allreduce.py" x ||
  fail "--dry-run --hostfile failed"

# ---- 1. all-reduce ---------------------------------------------------------------------------------
out="$tmp/out dir 'q'"
mkdir -p "$out"
echo "=== 1. all-reduce over 3 hosts"
"$TRUN" --hostfile "$tmp/hosts" --rsh "$rsh" --master-port 29551 --tee 3 "$TRUN_REPO/tests/helpers/allreduce.py" \
  "$out" >"$tmp/1.out" 2>"$tmp/1.err"
rc=$?
dump_agent "trun --hostfile (1)" "$tmp/1.out" "$tmp/1.err"
[ $rc = 0 ] || fail "trun --hostfile exited $rc, want 0"
for r in 0 1 2 3 4 5; do
  [ -f "$out/ok.0.$r" ] || fail "rank $r wrote no result into '$out'"
  line="[10.251.0.$((r / 2 + 1))] [default$((r % 2))]:rank $r/6 attempt 0: all_reduce ok"
  grep -qF -- "$line" "$tmp/1.out" || fail "no '$line' in trun's stdout"
done
bad=$(grep -cv '^\[10\.251\.0\.[123]\] ' "$tmp/1.out")
[ "$bad" = 0 ] || fail "$bad stdout line(s) without a [host] prefix"
grep -q '^\[10\.251\.0\.2\] ' "$tmp/1.err" || fail "no stderr line of host 10.251.0.2 with its prefix"
echo "ok: 6 ranks on 3 hosts, every output line prefixed with its host"

# ---- 2. a failing rank -------------------------------------------------------------------------------
echo "=== 2. rank 3 exits 7"
"$TRUN" --hostfile "$tmp/hosts" --rsh "$rsh" --master-port 29552 "$TRUN_REPO/tests/helpers/allreduce.py" "$out" \
  --fail-rank 3 --fail-code 7 >"$tmp/2.out" 2>"$tmp/2.err"
rc=$?
dump_agent "trun --hostfile (2)" "$tmp/2.out" "$tmp/2.err"
[ $rc = 1 ] || fail "trun --hostfile exited $rc with a failed rank, want 1 (the agents' code)"
grep -qF "[10.251.0.1]   rank      : 3 (local_rank: 1)" "$tmp/2.err" || fail "node 0's report does not name rank 3"
grep -qF "[10.251.0.1]   exitcode  : 7" "$tmp/2.err" || fail "node 0's report does not give exit code 7"
grep -q "trun: error: the job failed: the first host to fail was 10.251.0.[123] (node rank [012], exit 1)" "$tmp/2.err" ||
  fail "trun did not name the first host that failed"
echo "ok: exit 1, rank 3's exit code 7 in node 0's report"

# ---- 3. Ctrl-C ---------------------------------------------------------------------------------------
echo "=== 3. SIGINT to trun while training"
mkdir -p "$tmp/loop"
LOOP_OUT=$tmp/loop "$TRUN" --hostfile "$tmp/hosts" --rsh "$rsh" --master-port 29553 \
  "$TRUN_REPO/tests/helpers/loop_worker.py" >"$tmp/3.out" 2>"$tmp/3.err" &
launcher=$!
wait_for 'n=$(ls "$tmp/loop" | grep -c "^ready\.0\."); [ "$n" = 6 ]' 120 || {
  dump_agent "trun --hostfile (3)" "$tmp/3.out" "$tmp/3.err"; show_marked; fail "the 6 ranks did not start training"; }
echo "job processes before SIGINT:"; show_marked
n_agents=$(count_marked "--node-rank=")
[ "$n_agents" -ge 3 ] || fail "$n_agents remote agent processes, want 3 (or more with their guards)"
kill -INT "$launcher"
wait_pid_exit "$launcher" 120 || { show_marked; fail "trun still runs 120 s after SIGINT"; }
rc=$WAIT_RC
launcher=""
dump_agent "trun --hostfile (3)" "$tmp/3.out" "$tmp/3.err"
[ $rc = 1 ] || fail "trun exited $rc after SIGINT, want 1"
for h in 1 2 3; do
  grep -q "^\[10\.251\.0\.$h\] trun: info: --watch-stdin: the launcher sent SIGINT" "$tmp/3.err" ||
    fail "the agent of 10.251.0.$h did not get the SIGINT on its stdin"
  grep -q "^\[10\.251\.0\.$h\] .*SIGINT: forwarding it to the workers" "$tmp/3.err" ||
    fail "the agent of 10.251.0.$h did not get the SIGINT"
done
if ! wait_for '[ -z "$(marked_pids)" ]' 20; then
  show_marked
  fail "processes of the job are left after trun exited"
fi
echo "PASS: hostfile launch over 3 namespaces: all-reduce, host prefixes, failure code, SIGINT to every agent"
