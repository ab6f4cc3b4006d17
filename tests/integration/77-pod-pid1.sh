#!/usr/bin/env bash
# runner: lock=dist
# trun as the pod entrypoint, PID 1 of a real container: the image `make image` builds (packaging/container/
# Containerfile on the offline torch base), run by podman + runc as root (tests/helpers/pod_lib.sh).
#  1. make image BASE=localhost/trun-base:bookworm-torch IMAGE=<this test's>: offline; `podman run IMAGE
#     --version` runs the entrypoint trun from PATH; the examples are at /opt/trun/examples; PID 1 is trun.
#     The image's size, the time of `podman run --rm IMAGE --version` and from `podman run -d` to the workers
#     running are printed (measurements, not assertions).
#  2. podman stop: the SIGTERM to PID 1 reaches both workers (their trap writes a file), the container exits
#     with trun's code for a stopped job, 1, by itself (not podman's SIGKILL: 137); a worker that ignores
#     SIGTERM is killed after trun's --shutdown-timeout (3 s), still exit 1, before podman's time-out (60 s).
#  3. podman kill -s INT: SIGINT reaches both workers; exit 1.
#  4. A worker whose children fork orphans (they outlive their parent): the orphans are re-parented to trun
#     (PID 1) and, once they exit, no zombie is left in the container while the job runs.
#  5. Exit codes, what a Job's back-off and podFailurePolicy read: a worker exiting 7 -> 1 with torchrun's
#     failure report naming exitcode 7; a bad option -> 2; a node failing the health gate (the fake NVML with
#     an uncorrectable ECC error, --health-check fail) -> 3.
#  6. /dev/shm at the runtime's 64 MiB default: the shm health warning with its fix; --shm-size 1g: none.
#  7. examples/train_ddp.py, 2 gloo workers with torch 1.13, in the container: exit 0, both replicas in sync.
# Exit: 0 pass, anything else fail (a runtime that cannot start a container included).
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
. "$TRUN_REPO/tests/helpers/pod_lib.sh"
. "$TRUN_REPO/tests/helpers/health_lib.sh"
pod_setup 77

echo "== 1. make image, the entrypoint, PID 1"
pod_build
size=$(podman image inspect --format '{{.Size}}' "$pod_image")
echo "image $pod_image: $((size / 1000000)) MB"
t0=$(now)
v=$(podman run --rm --network none "$pod_image" --version) || fail "1: podman run $pod_image --version failed: $v"
echo "podman run --rm $pod_image --version: $(elapsed "$t0") s: $v"
[[ $v == "trun $(cat "$TRUN_REPO/VERSION") "* ]] || fail "1: --version says '$v'"
where=$(podman run --rm --network none --entrypoint /bin/sh "$pod_image" -c 'command -v trun; ls /opt/trun/examples/train_ddp.py')
echo "$where"
grep -qx "/opt/trun-$(cat "$TRUN_REPO/VERSION")-linux-x86_64/bin/trun" <<<"$where" || fail "1: trun on PATH: $where"
t0=$(now)
podman run -d --network none --name p1 -v "$pod_out:/out" "$pod_image" --standalone --nproc-per-node 1 --no-python \
  /bin/sh -c 'cat /proc/1/cmdline | tr "\0" " " >/out/p1.pid1; date +%s.%N >/out/p1.started; exec sleep 300' >/dev/null ||
  fail "1: podman run -d failed"
wait_for "[ -s '$pod_out/p1.started' ]" 60 || { pod_logs p1; fail "1: the worker did not start"; }
echo "podman run -d -> worker running: $(awk -v a="$t0" '{printf "%.2f", $1 - a}' "$pod_out/p1.started") s"
grep -q "^trun --standalone" "$pod_out/p1.pid1" || fail "1: PID 1 is not trun: $(cat "$pod_out/p1.pid1")"
podman rm -f -t 0 p1 >/dev/null
echo "ok 1"

# A job whose 2 workers write /out/<name>.up.<local rank> and, on SIGNAL, /out/<name>.<signal>.<local rank>
# before exiting 128+n; with IGNORE they ignore SIGTERM.
job() { # name signal [ignore] [trun options...]
  local name=$1 sig=$2 ign=$3
  shift 3
  local body="echo up >/out/$name.up.\$LOCAL_RANK; while :; do sleep 0.1; done"
  if [ "$ign" = ignore ]; then
    body="trap '' TERM; $body"
  else
    body="trap 'echo got >/out/$name.$sig.\$LOCAL_RANK; exit 1' $sig; $body"
  fi
  podman run -d --network none --name "$name" -v "$pod_out:/out" "$pod_image" --standalone --nproc-per-node 2 "$@" \
    --no-python /bin/sh -c "$body" >/dev/null || fail "podman run -d $name failed"
  wait_for "[ -e '$pod_out/$name.up.0' ] && [ -e '$pod_out/$name.up.1' ]" 60 || { pod_logs "$name"; fail "$name: the workers did not start"; }
}

# stop NAME WHAT: podman stop (its own time-out 60 s), the time taken printed; the container must exit 1 by
# itself (137 would be podman's SIGKILL).
stop() {
  local t0 took rc
  t0=$(now)
  podman stop -t 60 "$1" >/dev/null || fail "2: podman stop $1 failed"
  took=$(elapsed "$t0")
  pod_logs "$1"
  rc=$(pod_exit "$1")
  echo "podman stop $1 ($2): $took s, exit $rc"
  [ "$rc" = 1 ] || fail "2: $1 exited $rc, want 1 (trun stopped by a signal; 137 would be podman's SIGKILL)"
}

echo "== 2. podman stop: SIGTERM forwarded, exit 1 within the shutdown time-out"
job s1 TERM -
stop s1 "workers that exit on SIGTERM"
[ -e "$pod_out/s1.TERM.0" ] && [ -e "$pod_out/s1.TERM.1" ] || fail "2: SIGTERM did not reach both workers"
podman logs s1 2>&1 | grep -q "SIGTERM: forwarding it to the workers" || fail "2: trun did not say it forwards SIGTERM"
job s2 TERM ignore --shutdown-timeout 3
stop s2 "workers that ignore SIGTERM, --shutdown-timeout 3"
podman logs s2 2>&1 | grep -q "after the stop signal: sending SIGKILL" || fail "2: trun did not escalate to SIGKILL"
echo "ok 2"

echo "== 3. podman kill -s INT"
job i1 INT -
podman kill -s INT i1 >/dev/null || fail "3: podman kill -s INT failed"
pod_wait i1 60 || { pod_logs i1; fail "3: the container still runs 60 s after SIGINT"; }
pod_logs i1
rc=$(pod_exit i1)
[ "$rc" = 1 ] || fail "3: exit $rc after SIGINT, want 1"
[ -e "$pod_out/i1.INT.0" ] && [ -e "$pod_out/i1.INT.1" ] || fail "3: SIGINT did not reach both workers"
echo "ok 3"

echo "== 4. orphans of a worker are reaped by PID 1"
# Each subshell forks a `sleep 2.5` and exits at once: the sleeps are orphans.
podman run -d --network none --name o1 "$pod_image" --standalone --nproc-per-node 1 --no-python /bin/sh -c \
  '(sleep 2.5 &); (sleep 2.5 &); (sleep 2.5 &); exec sleep 300' >/dev/null || fail "4: podman run o1 failed"
# "pid state ppid | argv" of every process in the container
procs() {
  podman exec o1 /bin/sh -c 'for d in /proc/[0-9]*; do [ "${d#/proc/}" != $$ ] || continue
    s=$(cat $d/stat 2>/dev/null) || continue
    set -- ${s##*) }; echo "${d#/proc/} $1 $2 | $(tr "\0" " " <$d/cmdline 2>/dev/null)"; done' 2>/dev/null
}
orphans() { procs | awk -F' [|] ' -v want="$1" '$2 == "sleep 2.5 " && (want == "" || $1 ~ want) {n++} END {print n+0}'; }
wait_for "[ \"\$(orphans ' 1$')\" = 3 ]" 30 || { procs; pod_logs o1; fail "4: the 3 orphans were not re-parented to PID 1"; }
echo "orphans re-parented to PID 1:"
procs | grep -a "| sleep 2.5 "
wait_for "[ \"\$(orphans '')\" = 0 ]" 30 || { procs; fail "4: the orphans did not end"; }
sleep 0.5
procs | tee "$tmp/procs"
awk '$2 == "Z"' "$tmp/procs" | grep -aq . && fail "4: zombies left in the container: $(awk '$2 == "Z"' "$tmp/procs")"
grep -aq "^1 S 0 | trun " "$tmp/procs" || fail "4: trun is not PID 1 or not alive"
podman rm -f -t 0 o1 >/dev/null
echo "ok 4"

echo "== 5. exit codes"
podman run --network none --name w7 "$pod_image" --standalone --nproc-per-node 2 --no-python /bin/sh -c 'exit 7' >"$tmp/w7.log" 2>&1
rc=$?
cat "$tmp/w7.log"
[ "$rc" = 1 ] && [ "$(pod_exit w7)" = 1 ] || fail "5: a worker exiting 7: container exit $rc, want 1"
grep -q "exitcode  : 7 " "$tmp/w7.log" || fail "5: the failure report does not name exitcode 7"
podman run --rm --network none "$pod_image" --nproc-per-node two x.py >"$tmp/bad.log" 2>&1
rc=$?
cat "$tmp/bad.log"
[ "$rc" = 2 ] || fail "5: a bad option: exit $rc, want 2"
health_node "$tmp" 0 '{"ecc_volatile_uncorrected": 2}'
jansson=$(readlink -f /usr/lib/x86_64-linux-gnu/libjansson.so.4)
envs=()
for kv in $(health_env "$tmp" 0); do envs+=(-e "$kv"); done
# The fixture and the fake NVML at the same paths as here; the fake needs jansson, which the base lacks.
podman run --rm --network none -v "$tmp:$tmp:ro" -v "$shim:$shim:ro" -v "$jansson:/usr/lib/x86_64-linux-gnu/libjansson.so.4:ro" \
  "${envs[@]}" "$pod_image" --health-check fail --standalone --nproc-per-node 1 --no-python /bin/true >"$tmp/h.log" 2>&1
rc=$?
cat "$tmp/h.log"
[ "$rc" = 3 ] || fail "5: a node failing the health gate: exit $rc, want 3"
grep -q "trun: health: FAIL ecc" "$tmp/h.log" || fail "5: the failed check is not named"
echo "ok 5"

echo "== 6. /dev/shm at the default 64 MiB: the shm warning; 1 GiB: none"
podman run --rm --network none "$pod_image" --standalone --no-python /bin/true >"$tmp/shm64.log" 2>&1 || fail "6: exit $? at 64 MiB"
grep "shm" "$tmp/shm64.log"
grep -q "trun: health: WARN shm \[6[0-9] MiB\]: /dev/shm is only" "$tmp/shm64.log" || fail "6: no shm warning at 64 MiB"
grep -q "shm-size=1g" "$tmp/shm64.log" || fail "6: the warning does not give the fix"
podman run --rm --network none --shm-size 1g "$pod_image" --standalone --no-python /bin/true >"$tmp/shm1g.log" 2>&1 || fail "6: exit $? at 1 GiB"
! grep -q "shm" "$tmp/shm1g.log" || fail "6: a shm warning at 1 GiB: $(cat "$tmp/shm1g.log")"
echo "ok 6"

echo "== 7. 2 gloo workers train in the container"
t0=$(now)
podman run --rm --network none --shm-size 1g "$pod_image" --standalone --nproc-per-node 2 /opt/trun/examples/train_ddp.py --steps 5 \
  >"$tmp/train.log" 2>&1
rc=$?
cat "$tmp/train.log"
echo "train_ddp.py, 2 workers, 5 steps, in a container: $(elapsed "$t0") s, exit $rc"
[ "$rc" = 0 ] || fail "7: exit $rc"
[ "$(grep -c "params checksum" "$tmp/train.log")" = 2 ] || fail "7: want a checksum from each of 2 workers"
[ "$(grep "params checksum" "$tmp/train.log" | awk '{print $NF}' | sort -u | wc -l)" = 1 ] || fail "7: replicas differ"
echo "ok 7"
echo "PASS: trun as PID 1 of a podman + runc container"
