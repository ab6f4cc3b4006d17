#!/usr/bin/env bash
# runner: alone
# trun --hostfile over real OpenSSH: tests/helpers/ssh_hosts.sh starts sshd on three hosts h1..h3 (network + UTS
# namespaces, 10.254.0.11-13, host keys and a user key made here, known_hosts filled), all in a sandbox that
# ends with the test. trun runs on the login host with its default --rsh (ssh -o BatchMode=yes ...) and the
# hostfile "h1 slots=2 / h2 slots=2 / h3 slots=2"; the hosts' sessions get PYTHON_EXEC (Debian's torch 1.13)
# from ~/.ssh/environment, as a user would set it there. Scenarios, in order:
#   1. train      examples/train_ddp.py --steps 20 on 3 hosts x 2 workers (gloo): exit 0, 6 ranks agree and the
#                 loss falls, every output line carries its host's prefix.
#   2. ctrl-c     SIGINT to trun while every rank trains: ssh does not forward signals, so trun writes the
#                 signal on each agent's stdin (--watch-stdin): every remote agent reports the SIGINT, trun exits
#                 1, no agent or worker is left on any host, and the ssh sessions ended.
#   3. launcher-killed  trun SIGKILLed while every rank trains (nothing can be forwarded): its ssh clients die
#                 with it, each session's stdin ends and every remote agent stops as on SIGHUP (the agents'
#                 --events file: every worker ended by SIGHUP, or by SIGTERM on a host whose agent first saw
#                 another leave the job on its SIGHUP); nothing is left.
#   4. sshd-down  h3's sshd is stopped, then a job starts: ssh to h3 is refused (exit 255), trun stops the
#                 other two agents (a static job cannot start without h3) and exits 1 naming h3; nothing is
#                 left on h1 and h2. The time to exit is printed (documented: ssh's ConnectTimeout, 10 s in
#                 the default --rsh, at most; a refused connection at once).
# After the hosts are gone: no process of the test (TRUN_TEST_MARKER), no network namespace of its hosts in
# the machine's /run/netns, /etc/hosts and /etc/passwd unchanged. Each scenario prints "TIME <name> <seconds>". Exit 0 pass, 77 skip, else fail.
set -u
here=$(cd "$(dirname "$0")" && pwd)

# ---- outside the sandbox ---------------------------------------------------------------------------------
if [ "${1:-}" != --in-sandbox ]; then
  . "$here/../helpers/mn_lib.sh"
  need_torch
  tmp=$(mktemp -d /tmp/trun-59.XXXXXX)
  trap 'kill_marked; rm -rf "$tmp"' EXIT
  sandbox_snapshot
  mkdir -p "$tmp/tmpdir"
  t0=$(now)
  # What the hosts' sessions get (~/.ssh/environment): the workers' Python, trun's log dirs, the marker.
  T59_TMP=$tmp MARKER=$MARKER TMPDIR=$tmp/tmpdir SSH_HOSTS_ENV="PYTHON_EXEC TMPDIR TRUN_TEST_MARKER" \
    "$TRUN_REPO/tests/helpers/ssh_hosts.sh" --hosts 3 bash "$0" --in-sandbox
  rc=$?
  echo "TIME sandbox-total $(elapsed "$t0")"
  sandbox_left h1 h2 h3
  [ $rc != 0 ] || echo "PASS: 4 ssh scenarios; nothing left behind"
  exit $rc
fi

# ---- inside: the login host -------------------------------------------------------------------------------
. "$here/../helpers/mn_lib.sh"
tmp=$T59_TMP
cd "$tmp"
printf '# 3 hosts, 2 workers each\nh1 slots=2\nh2 slots=2\nh3 slots=2\n' >"$tmp/hosts"
script=$TRUN_REPO/examples/train_ddp.py # the same path on every host, as trun's own
model=(--batch 8 --seq 32 --d-model 64 --layers 2)
sc="" sc_t0=""
begin() { sc=$1; sc_t0=$(now); echo "=== $1: $2"; }
end() { echo "TIME $sc $(elapsed "$sc_t0")"; }
show() { # NAME
  echo "--- trun stdout (tail):"; tail -n 6 "$tmp/$1.out"
  echo "--- trun stderr:"; grep -vE '\*{20}|OMP_NUM_THREADS' "$tmp/$1.err" | tail -n 40
}
# The job's processes on the hosts (everything in this PID namespace is the test's): agents, workers, and
# sshd's per-session processes; the sshd listeners stay.
job_procs() { ps -e -o pid=,args= | grep -E 'train_ddp\.py|sshd: root@|[/ ]trun ' | grep -v grep; }
no_job_left() { # WHAT
  wait_for '[ -z "$(job_procs)" ]' 30 || { ps -e -o pid,ppid,stat,args --forest | cut -c1-170; fail "$1: processes are left (above)"; }
}
start_trun() { # NAME PORT ARGS...: trun --hostfile in the background, pid in TRUN_PID
  local name=$1 port=$2; shift 2
  "$TRUN" --hostfile "$tmp/hosts" --master-port "$port" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  TRUN_PID=$!
}
wait_trun() { # NAME LIMIT: its exit code in TRUN_RC
  wait_pid_exit "$TRUN_PID" "$2" || { show "$1"; ps -e -o pid,ppid,stat,args --forest | cut -c1-170; kill -KILL "$TRUN_PID"; fail "$1: trun still runs after $2 s"; }
  TRUN_RC=$WAIT_RC
}
wait_training() { # NAME
  wait_for "[ \$(grep -c '^\[h[123]\] step 3 loss' '$tmp/$1.out' 2>/dev/null) = 6 ]" 120 ||
    { show "$1"; fail "$1: the 6 ranks did not train"; }
  [ "$(job_procs | grep -c 'python3 -u')" = 6 ] || { job_procs; fail "$1: want 6 workers"; }
}

# 1 ---------------------------------------------------------------------------------------------------------
begin train "trun --hostfile hosts train_ddp.py --steps 20 (3 hosts x 2 workers over ssh)"
start_trun s1 29561 "$script" --steps 20 "${model[@]}"
wait_trun s1 300
show s1
[ "$TRUN_RC" = 0 ] || fail "train: trun exited $TRUN_RC"
"$TRUN_HOST_PY" "$TRUN_REPO/tests/tools/check_train.py" "$tmp/s1.out" 20 6 || fail "train: training check"
bad=$(grep -cv '^\[h[123]\] ' "$tmp/s1.out")
[ "$bad" = 0 ] || fail "train: $bad stdout line(s) without a [host] prefix"
for h in 1 2 3; do
  grep -q "^\[h$h\] step 20 loss" "$tmp/s1.out" || fail "train: host h$h printed no step 20"
done
no_job_left train
end

# 2 ---------------------------------------------------------------------------------------------------------
begin ctrl-c "SIGINT to trun while the 6 ranks train"
start_trun s2 29562 "$script" --steps 100000 "${model[@]}"
wait_training s2
t=$(now)
kill -INT "$TRUN_PID"
wait_trun s2 120
echo "trun exited $TRUN_RC $(elapsed "$t") s after SIGINT"
show s2
[ "$TRUN_RC" = 1 ] || fail "ctrl-c: trun exited $TRUN_RC, want 1"
for h in 1 2 3; do
  grep -q "^\[h$h\] trun: info: --watch-stdin: the launcher sent SIGINT" "$tmp/s2.err" ||
    fail "ctrl-c: the agent on h$h did not get the SIGINT through its stdin"
  grep -q "^\[h$h\] trun: warning: SIGINT: forwarding it to the workers" "$tmp/s2.err" ||
    fail "ctrl-c: the agent on h$h did not stop its workers"
done
grep -q "trun: error: the job was stopped by SIGINT" "$tmp/s2.err" || fail "ctrl-c: trun does not say SIGINT stopped it"
no_job_left ctrl-c
end

# 3 ---------------------------------------------------------------------------------------------------------
begin launcher-killed "SIGKILL to trun while the 6 ranks train"
# The agents' --events file (one for all three, appended) says how their workers ended: nobody is left to
# print the agents' messages.
start_trun s3 29563 --events "$tmp/s3.events" "$script" --steps 100000 "${model[@]}"
wait_training s3
kill -KILL "$TRUN_PID"
wait "$TRUN_PID" 2>/dev/null
no_job_left launcher-killed
"$TRUN_HOST_PY" - "$tmp/s3.events" <<'PY' || fail "launcher-killed: the workers did not all end by the agents' SIGHUP"
import collections, json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
how = collections.defaultdict(collections.Counter)
for e in ev:
    if e["event"] == "worker_exit":
        how[e["host"]][e.get("signal")] += 1
# An agent whose stdin ended leaves the job at once (liveness: "it left the job: stopped by SIGHUP"); an agent
# that reads that before its own stdin's end stops its workers for the lost node (SIGTERM), also correct.
left = collections.defaultdict(set)
for e in ev:
    if e["event"] == "node_lost" and "stopped by SIGHUP" in e.get("cause", ""):
        left[e["host"]].add(e["node"])
print("workers' end, per host:", {h: dict(c) for h, c in how.items()}, "; nodes seen leaving on SIGHUP:",
      {h: sorted(n) for h, n in left.items()})
ok = all(how[h] == {"SIGHUP": 2} or (how[h] == {"SIGTERM": 2} and left[h]) for h in ("h1", "h2", "h3"))
sys.exit(0 if ok and any(how[h] == {"SIGHUP": 2} for h in how) else 1)
PY
end

# 4 ---------------------------------------------------------------------------------------------------------
begin sshd-down "h3's sshd stopped, then trun --hostfile"
ssh-host-down h3
wait_for '! ssh -o BatchMode=yes -o ConnectTimeout=2 h3 true 2>/dev/null' 20 || fail "sshd-down: h3 still answers"
t=$(now)
start_trun s4 29564 "$script" --steps 20 "${model[@]}"
wait_trun s4 120
echo "trun exited $TRUN_RC $(elapsed "$t") s after it started"
show s4
[ "$TRUN_RC" = 1 ] || fail "sshd-down: trun exited $TRUN_RC, want 1"
grep -q "trun: warning: host h3 (node rank 2): ssh exited 255" "$tmp/s4.err" || fail "sshd-down: trun does not name h3's ssh failure"
grep -q "trun: error: the job failed: the first host to fail was h3 (node rank 2, exit 255: ssh could not reach it" \
  "$tmp/s4.err" || fail "sshd-down: trun's last error does not name h3"
grep -q "stopping the 2 other host(s)" "$tmp/s4.err" || fail "sshd-down: the other hosts were not stopped"
for h in 1 2; do
  grep -q "^\[h$h\] trun: info: --watch-stdin: the launcher sent SIGTERM" "$tmp/s4.err" ||
    fail "sshd-down: the agent on h$h did not get the SIGTERM"
done
no_job_left sshd-down
end
exit 0
