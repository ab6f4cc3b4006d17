#!/usr/bin/env bash
# --warm-start-nccl: each pool process does NCCL's once-a-process set-up before it becomes a worker, and the
# agent asks the workers' NCCL RAS where it then serves. No GPU here: the fake CUDA driver and a copy of the
# fake NCCL named libnccl.so.2 (tests/fakes/cuda_nccl_shim.c), which a warm module loads as torch loads NCCL.
#  - the first start's pool processes do not set NCCL up (the start waits for them); every restarted worker
#    (local rank 1 crashes twice) was set up by its pool process: one one-rank communicator on its own
#    device (LOCAL_RANK), in a thread other than the main one, with NCCL_RAS_ADDR a loopback port of the
#    process's own (not the job's), NCCL_DEBUG_FILE /dev/null (not the worker's file) and neither the user's
#    NCCL_COMM_ID (a running job's bootstrap root) nor NCCL_GRAPH_DUMP_FILE;
#  - the worker's environment is the job's again (NCCL_RAS_ADDR, NCCL_DEBUG_FILE, NCCL_COMM_ID as trun and the
#    user set them), and NCCL re-read its debug settings after the handover (ncclResetDebugInit in the worker);
#  - the agent's hang detection asks a worker's own RAS port (the fake RAS logs the client in that worker),
#    and the worker_start event names that port (nccl_ras); a client of the job's own RAS address (a tool
#    asking NCCL_RAS_ADDR) reaches a worker of the round, relayed by the agent, and where no worker serves on
#    a port of its own the agent does not listen there;
#    a slot's pool process is never given the port its live worker serves on, and the agent holds each
#    such port (a plain bind of it fails while the job runs, even where NCCL's RAS does not listen);
#  - without libnccl among the pool's imports nothing is set up, the workers still start warm, and the
#    restart's pool process says why; a set-up that does not end within TRUN_WARM_NCCL_TIMEOUT makes the
#    pool process give up (that slot starts cold, the job goes on); --dry-run says what the pool does; --warm-start-nccl without --warm-start-cuda is a usage
#    error (exit 2).
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
[ -f "$build/libcuda-nccl-fake.so" ] || fail "$build/libcuda-nccl-fake.so is missing; run 'make' first"

mkdir -p "$tmp/mods" "$tmp/lib" "$tmp/out"
cp "$build/libcuda-nccl-fake.so" "$tmp/lib/libnccl.so.2"
cat >"$tmp/mods/fakenccl.py" <<EOF
import ctypes
ctypes.CDLL("$tmp/lib/libnccl.so.2")
EOF
# The worker: says its pid, NCCL environment and attempt; local rank 1 fails attempts 0 and 1 (once local
# rank 0 has said its part); in attempt 2
# both wait (at most 30 s) until the agent has asked local rank 0's RAS, then exit 0.
cat >"$tmp/w.py" <<'EOF'
import os, sys, time
out, lr, att = sys.argv[1], os.environ["LOCAL_RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
me = os.path.join(out, "w.%s.%s" % (att, lr))
with open(me + ".tmp", "w") as f:  # renamed into place whole: the other rank waits for it
    f.write("pid %d ras %s debug-file %s comm-id %s\n" % (os.getpid(), os.environ.get("NCCL_RAS_ADDR", "-"),
                                                         os.environ.get("NCCL_DEBUG_FILE", "-"),
                                                         os.environ.get("NCCL_COMM_ID", "-")))
os.rename(me + ".tmp", me)
if att in ("0", "1") and lr == "1":
    # local rank 0 first says who it is (a loaded box may start it after this one's exit stopped the round)
    deadline = time.time() + 30
    while not os.path.exists(os.path.join(out, "w.%s.0" % att)) and time.time() < deadline:
        time.sleep(0.05)
    sys.exit(3)
if att in ("0", "1"):
    time.sleep(1)
    sys.exit(0)
deadline = time.time() + 30
p0 = os.path.join(out, "w.2.0")
asked = False
while time.time() < deadline and not asked:
    try:
        pid0 = open(p0).read().split()[1]
        asked = ("pid %s ras-client\n" % pid0) in open(os.environ["TRUN_FAKE_NCCL_LOG"]).read()
    except (OSError, IndexError):
        pass
    if not asked:
        time.sleep(0.1)
if not asked:
    sys.exit(4)
if lr == "0":
    # a tool asking the job's own RAS address (NCCL_RAS_ADDR) reaches a worker of this round, through the agent
    import socket
    host, port = os.environ["NCCL_RAS_ADDR"].rsplit(":", 1)
    answers = []
    for _ in range(4):  # each connection reaches some worker: all of them this round's
        got = b""
        try:
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(b"TRUN-FAKE-PING\n")
            while not got.endswith(b"\n"):
                b = s.recv(64)
                if not b:
                    break
                got += b
            s.close()
        except OSError as e:
            got = ("error-%s" % e.errno).encode()
        answers.append(got.decode().strip() or "nothing")
    with open(os.path.join(out, "job-ras.tmp"), "w") as f:
        f.write(" ".join(answers) + "\n")
    os.rename(os.path.join(out, "job-ras.tmp"), os.path.join(out, "job-ras"))
sys.exit(0)
EOF

echo "== --warm-start --warm-start-cuda --warm-start-nccl, local rank 1 crashes twice"
rc=0
TRUN_CUDA_DRIVER_LIBRARY=$build/libcuda-nccl-fake.so TRUN_FAKE_CUDA_LOG=$tmp/cuda.log \
  TRUN_FAKE_NCCL_LOG=$tmp/nccl.log PYTHONPATH=$tmp/mods PYTHON_EXEC=$host_py TRUN_HANG_WINDOW=1 \
  NCCL_DEBUG=WARN NCCL_DEBUG_FILE=$tmp/user-debug.%p NCCL_COMM_ID=127.0.0.1:9 \
  NCCL_GRAPH_DUMP_FILE=$tmp/graph.xml TRUN_LOG_LEVEL=debug \
  timeout 120 "$trun" --warm-start --warm-start-cuda --warm-start-nccl --warm-start-modules fakenccl \
  --events "$tmp/events.jsonl" --standalone --nproc-per-node 2 --max-restarts 2 "$tmp/w.py" "$tmp/out" >"$tmp/trun.out" 2>"$tmp/trun.err" ||
  rc=$?
show() {
  sed 's/^/    err| /' "$tmp/trun.err" | tail -40
  sed 's/^/    nccl| /' "$tmp/nccl.log" 2>/dev/null
}
[ $rc -eq 0 ] || {
  show
  fail "trun exited $rc, want 0"
}
job_ras=""
for att in 0 1 2; do
  for lr in 0 1; do
    f=$tmp/out/w.$att.$lr
    [ -f "$f" ] || fail "attempt $att local rank $lr did not run"
    read -r _ wpid _ ras _ dfile _ commid <"$f"
    [ -z "$job_ras" ] && job_ras=$ras
    [ "$ras" = "$job_ras" ] && [[ "$ras" == 127.0.0.1:* ]] ||
      fail "attempt $att local rank $lr: NCCL_RAS_ADDR is '$ras', want the job's own ($job_ras) for every worker"
    [ "$dfile" = "$tmp/user-debug.%p" ] && [ "$commid" = 127.0.0.1:9 ] ||
      fail "attempt $att local rank $lr: NCCL_DEBUG_FILE is '$dfile', NCCL_COMM_ID '$commid', want the user's ($tmp/user-debug.%p, 127.0.0.1:9)"
    grep -q "^pid $wpid retain $lr cvd -$" "$tmp/cuda.log" ||
      fail "attempt $att local rank $lr (pid $wpid) did not start warm with its CUDA context: $(cat "$tmp/cuda.log")"
    inits=$(grep -c "^pid $wpid init-all " "$tmp/nccl.log" || true)
    if [ "$att" = 0 ]; then # the first start waits for its pool: NCCL is not set up there
      [ "$inits" -eq 0 ] || fail "attempt 0 local rank $lr (pid $wpid): NCCL was set up in a pool process of the first start"
      grep -q "local rank $lr starts warm (pool process $wpid)" "$tmp/trun.err" ||
        fail "attempt 0 local rank $lr did not start warm: $(grep -i 'starts warm' "$tmp/trun.err")"
      grep '"event": *"worker_start"' "$tmp/events.jsonl" | grep "\"pid\": *$wpid[,}]" | grep -q nccl_ras &&
        fail "attempt 0 local rank $lr: its worker_start event names a RAS port of its own; it serves on the job's"
      continue
    fi
    [ "$inits" -eq 1 ] || {
      show
      fail "attempt $att local rank $lr (pid $wpid): $inits NCCL set-ups in its pool process, want 1"
    }
    line=$(grep "^pid $wpid init-all " "$tmp/nccl.log")
    own=$(sed -n 's/.* ras \(127\.0\.0\.1:[0-9]*\) .*/\1/p' <<<"$line")
    [[ "$line" == "pid $wpid init-all n 1 dev $lr thread other ras 127.0.0.1:"*" debug-file /dev/null comm-id - graph-dump -" ]] ||
      fail "attempt $att local rank $lr: the set-up was '$line', want a one-rank communicator on device $lr in a helper thread with its own RAS port, NCCL_DEBUG_FILE=/dev/null, no NCCL_COMM_ID (the job's bootstrap root) and no NCCL_GRAPH_DUMP_FILE"
    [ -n "$own" ] && [ "$own" != "$job_ras" ] ||
      fail "attempt $att local rank $lr: the pool's RAS port '$own' is the job's ($job_ras): it would answer for a job it is not in"
    grep -q "^pid $wpid destroy$" "$tmp/nccl.log" ||
      fail "attempt $att local rank $lr: the one-rank communicator was not destroyed"
    resets=$(grep -c "^pid $wpid reset-debug NCCL_DEBUG WARN$" "$tmp/nccl.log" || true)
    [ "$resets" -ge 2 ] ||
      fail "attempt $att local rank $lr: NCCL re-read its debug settings $resets times, want after the set-up and after the handover"
    grep -q "local rank $lr starts warm (pool process $wpid; its NCCL RAS serves on $own)" "$tmp/trun.err" ||
      fail "attempt $att local rank $lr: the agent did not take its RAS address $own: $(grep -i 'starts warm' "$tmp/trun.err")"
    grep '"event": *"worker_start"' "$tmp/events.jsonl" | grep "\"pid\": *$wpid[,}]" | grep -q "\"nccl_ras\": *\"$own\"" ||
      fail "attempt $att local rank $lr: its worker_start event does not name its RAS address $own: $(grep worker_start "$tmp/events.jsonl")"
  done
done
for lr in 0 1; do
  p1=$(sed -n "s/^pid $(awk '{print $2}' "$tmp/out/w.1.$lr") init-all .* ras \(127[^ ]*\) .*/\1/p" "$tmp/nccl.log")
  p2=$(sed -n "s/^pid $(awk '{print $2}' "$tmp/out/w.2.$lr") init-all .* ras \(127[^ ]*\) .*/\1/p" "$tmp/nccl.log")
  [ -n "$p1" ] && [ "$p1" != "$p2" ] ||
    fail "local rank $lr: attempt 1's worker and attempt 2's pool process were given the same RAS port ($p1, $p2): the pool process would answer beside the live worker"
done
pid0=$(awk '{print $2}' "$tmp/out/w.2.0")
grep -q "^pid $pid0 ras-client$" "$tmp/nccl.log" || fail "the agent did not ask local rank 0's own RAS port"
grep -q "ras-failed" "$tmp/nccl.log" && fail "a fake RAS could not listen: $(grep ras-failed "$tmp/nccl.log")"
pid1=$(awk '{print $2}' "$tmp/out/w.2.1")
for a in $(cat "$tmp/out/job-ras" 2>/dev/null || echo none); do
  [ "$a" = pong ] && continue
  [ "$a" = "$pid0" ] || [ "$a" = "$pid1" ] ||
    fail "a client of the job's RAS address $job_ras got '$(cat "$tmp/out/job-ras" 2>/dev/null)', want a pong from a worker of the last round ($pid0 or $pid1) each time: the agent relays it to a worker's own port"
done
grep -q "relays each client to a worker's own NCCL RAS port" "$tmp/trun.err" ||
  fail "the agent did not say that the job's RAS address relays: $(grep -i relay "$tmp/trun.err")"
echo PASS

echo "== the agent holds each pool process's RAS port (here the fake RAS does not listen: only the agent's socket)"
rm -f "$tmp/nccl.log"
cat >"$tmp/hold.py" <<'EOF'
import os, socket, sys
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    sys.exit(1)  # the restart's worker is the one whose pool process set NCCL up
log = open(os.environ["TRUN_FAKE_NCCL_LOG"]).read().splitlines()
mine = [ln for ln in log if ln.startswith("pid %d init-all " % os.getpid())][0]
port = int(mine.split(" ras 127.0.0.1:")[1].split()[0])
s = socket.socket()  # a plain bind, as any other user's process would make
try:
    s.bind(("127.0.0.1", port))
    print("free")
except OSError as e:
    print("held" if e.errno == 98 else "error %s" % e)
# no worker serves RAS on a port of its own: the agent does not listen on the job's address either
host, jport = os.environ["NCCL_RAS_ADDR"].rsplit(":", 1)
try:
    socket.create_connection((host, int(jport)), timeout=10).close()
    print("job-port-listens")
except ConnectionRefusedError:
    print("job-port-refused")
EOF
rc=0
TRUN_CUDA_DRIVER_LIBRARY=$build/libcuda-nccl-fake.so TRUN_FAKE_NCCL_LOG=$tmp/nccl.log TRUN_FAKE_NCCL_RAS=0 \
  PYTHONPATH=$tmp/mods PYTHON_EXEC=$host_py TRUN_LOG_LEVEL=debug timeout 120 "$trun" --warm-start \
  --warm-start-cuda --warm-start-nccl --warm-start-modules fakenccl --standalone --nproc-per-node 1 \
  --max-restarts 1 "$tmp/hold.py" >"$tmp/hold.out" 2>"$tmp/hold.err" || rc=$?
[ $rc -eq 0 ] || fail "trun exited $rc, want 0: $(tail -5 "$tmp/hold.err")"
grep -qx "held" "$tmp/hold.out" ||
  fail "the worker's RAS port was free to another process's bind while the job ran ($(cat "$tmp/hold.out")): the agent must hold it"
grep -qx "job-port-refused" "$tmp/hold.out" ||
  fail "with no worker serving RAS on a port of its own, the job's RAS address was not left to NCCL ($(cat "$tmp/hold.out")): the agent must not listen there"
grep -q "its NCCL RAS serves on" "$tmp/hold.err" &&
  fail "the agent took a RAS address from a pool process whose RAS does not listen: $(grep 'serves on' "$tmp/hold.err")"
echo PASS

echo "== --warm-start-nccl without libnccl among the imports: warm starts, nothing set up, the reason said"
rm -f "$tmp/nccl.log"
echo 'pass' >"$tmp/ok.py"
printf 'import os, sys\nsys.exit(1 if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" else 0)\n' >"$tmp/once.py"
rc=0
TRUN_CUDA_DRIVER_LIBRARY=$build/libcuda-nccl-fake.so TRUN_FAKE_NCCL_LOG=$tmp/nccl.log PYTHON_EXEC=$host_py \
  TRUN_LOG_LEVEL=debug timeout 120 "$trun" --warm-start --warm-start-cuda --warm-start-nccl \
  --warm-start-modules json --standalone --nproc-per-node 1 --max-restarts 1 "$tmp/once.py" \
  >"$tmp/plain.out" 2>"$tmp/plain.err" || rc=$?
[ $rc -eq 0 ] || fail "trun exited $rc, want 0: $(tail -5 "$tmp/plain.err")"
[ "$(grep -c "local rank 0 starts warm (pool process [0-9]*)" "$tmp/plain.err")" -eq 2 ] ||
  fail "the workers did not start warm: $(grep -i 'warm' "$tmp/plain.err")"
grep -q "ready: CUDA context made on device 0; no NCCL set-up: the warm modules did not load libnccl" \
  "$tmp/plain.err" || fail "the pool did not say why NCCL was not set up: $(grep -i 'ready' "$tmp/plain.err")"
[ ! -s "$tmp/nccl.log" ] || fail "NCCL was set up without libnccl among the imports: $(cat "$tmp/nccl.log")"
echo PASS

echo "== a set-up that does not end (TRUN_WARM_NCCL_TIMEOUT): the pool process gives up, the restart starts cold"
rc=0
TRUN_CUDA_DRIVER_LIBRARY=$build/libcuda-nccl-fake.so TRUN_FAKE_NCCL_INIT_SLEEP=30 TRUN_WARM_NCCL_TIMEOUT=1 \
  PYTHONPATH=$tmp/mods PYTHON_EXEC=$host_py timeout 120 "$trun" --warm-start --warm-start-cuda \
  --warm-start-nccl --warm-start-modules fakenccl --standalone --nproc-per-node 1 --max-restarts 1 \
  "$tmp/once.py" >"$tmp/slow.out" 2>"$tmp/slow.err" || rc=$?
[ $rc -eq 0 ] || fail "trun exited $rc, want 0: $(tail -5 "$tmp/slow.err")"
grep -q "NCCL's one-rank set-up on device 0 did not end in 1 s; its workers start cold" "$tmp/slow.err" ||
  fail "the pool process did not give up on a set-up that does not end: $(grep -i 'warm' "$tmp/slow.err")"
echo PASS

echo "== --dry-run says what the pool does"
PYTHON_EXEC=$host_py "$trun" --dry-run --warm-start --warm-start-cuda --warm-start-nccl --standalone \
  --nproc-per-node 1 "$tmp/ok.py" >"$tmp/dry.out" 2>&1 || fail "--dry-run failed: $(cat "$tmp/dry.out")"
grep -q "makes its worker's CUDA context (--warm-start-cuda); those for a restart also do NCCL's once-a-process" \
  "$tmp/dry.out" || fail "--dry-run does not say the pool sets NCCL up: $(grep -A2 'warm start' "$tmp/dry.out")"
echo PASS

echo "== --warm-start-nccl without --warm-start-cuda"
rc=0
"$trun" --warm-start --warm-start-nccl --standalone --nproc-per-node 1 "$tmp/ok.py" >/dev/null 2>"$tmp/usage.err" ||
  rc=$?
[ $rc -eq 2 ] || fail "exit $rc, want 2"
grep -q -- "--warm-start-nccl needs --warm-start --warm-start-cuda" "$tmp/usage.err" ||
  fail "no clear error: $(cat "$tmp/usage.err")"
echo PASS
