#!/usr/bin/env bash
# The agent token against the job's own workers and strays (issue 41, findings 3, 4, 5 and 11), loopback
# only, real torch 1.13 workers (tests/helpers/token_worker.py):
#  1. A 2-node static job with a secret token, node 0 given it as TRUN_RDZV_TOKEN, node 1 as --rdzv-conf
#     trun_token=... and in PET_RDZV_CONF: each worker reads its agent's /proc/$PPID/environ and cmdline and
#     its own environment and finds the token in none of them; the tokens it finds there (masked) cannot
#     forge an exclusion record: the store refuses the write.
#  2. The same agent started as user nobody (setpriv; --standalone): its worker, also nobody, can open
#     neither /proc/$PPID/environ nor /proc/$PPID/mem (the agent is not dumpable while it holds a token).
#  3. A 2-node static job without TRUN_RDZV_TOKEN (--events): the agent that hosts the store warns once that
#     the job has no secret token (stderr and an insecure_token event), the other says nothing; LIST from a
#     client without the token (trun-store cli) shows the workers' torch keys and none of /trun/, though
#     the agents' keys are there (a CHECK of /trun/<run_id>/r0/go finds it).
#  4. A 2-node c10d job with a token: the test, holding the token, writes forged exclusion records before
#     node 1 joins: one 1e6 s long with an ANSI escape and a newline in its cause, one whose host name is
#     "n7 --wrap=id --output=/tmp/x", one "gpu[001-512]". Node 0's stderr names the first escaped and for
#     at most 1800 s (trun_exclude_seconds), never the others; --list-excluded slurm prints "n7" only and
#     json the escaped cause with seconds_left <= 1800; LIST without the token shows torch's
#     /torch.rendezvous.<run_id> and no key of the round's /trun/ space. The first attempt's workers then
#     fail (node 0 read the list before the records were written; the next round reads them) and the job
#     ends with exit 0.
#  5. --print-config and --dry-run with --rdzv-conf trun_token=... print it masked ('*'); the masked
#     value fed back exits 2.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-91.XXXXXX")
pids=()
cleanup() { kill_marked; for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
STORE_CLI=$TRUN_BUILD/trun-store
[ -x "$STORE_CLI" ] || fail "$STORE_CLI is not built (run make)"
W=$TRUN_REPO/tests/helpers/token_worker.py
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
tok=job48-secret-$(cat /proc/sys/kernel/random/uuid)
printf '%s\n' "$tok" >"$tmp/secret"

# ---- 1. workers read their agent's /proc ----
port=$(free_port)
mkdir -p "$tmp/o1"
note "1: 2-node static job on 127.0.0.1:$port with a token (node 0: TRUN_RDZV_TOKEN, node 1: --rdzv-conf)"
TRUN_RDZV_TOKEN=$tok "$TRUN" --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port "$port" \
  --nproc-per-node 1 --rdzv-id j48 --max-restarts 0 "$W" leak "$tmp/o1" "$tmp/secret" j48 >"$tmp/a0.out" 2>"$tmp/a0.err" &
pids+=($!)
a0=$!
PET_RDZV_CONF="join_timeout=600,trun_token=$tok" "$TRUN" --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 \
  --master-port "$port" --nproc-per-node 1 --rdzv-id j48 --max-restarts 0 --rdzv-conf "trun_token=$tok" \
  "$W" leak "$tmp/o1" "$tmp/secret" j48 >"$tmp/a1.out" 2>"$tmp/a1.err" &
pids+=($!)
a1=$!
for p in $a0 $a1; do wait_pid_exit "$p" 180 || bad "1: an agent did not finish"; done
for n in 0 1; do
  r=$(cat "$tmp/o1/leak.$n" 2>/dev/null) || { bad "1: worker $n wrote no report"; cat "$tmp/a$n.err"; continue; }
  note "1: worker $n: $(echo "$r" | tr '\n' ';')"
  for what in environ cmdline "own env"; do
    echo "$r" | grep -q "^$what: absent" || bad "1: worker $n found the token in its agent's $what ($(echo "$r" | grep "^$what"))"
  done
  ! echo "$r" | grep -q "^forge.*: written" || bad "1: worker $n forged an exclusion record ($(echo "$r" | grep '^forge'))"
  echo "$r" | grep -q "^forge.*: refused" || bad "1: worker $n made no refused forgery"
done
! grep -q -- "$tok" "$tmp/a0.err" "$tmp/a1.err" "$tmp/a0.out" "$tmp/a1.out" || bad "1: an agent printed the token"

# ---- 2. not dumpable: another user's worker cannot open the agent's environ or mem ----
command -v setpriv >/dev/null || fail "2: setpriv (util-linux) is missing"
id nobody >/dev/null 2>&1 || fail "2: there is no user nobody"
mkdir -p "$tmp/nb/o2" "$tmp/nb/tmp"
cp "$TRUN" "$W" "$tmp/nb/"
chmod 755 "$tmp" "$tmp/nb"
chown -R nobody "$tmp/nb"
port=$(free_port)
note "2: the agent as user nobody, --standalone, with TRUN_RDZV_TOKEN"
(cd "$tmp/nb" && HOME="$tmp/nb" TMPDIR="$tmp/nb/tmp" TRUN_RDZV_TOKEN=$tok setpriv --reuid nobody --regid "$(id -g nobody)" \
  --clear-groups "$tmp/nb/trun" --standalone --master-port "$port" --nproc-per-node 1 \
  "$tmp/nb/token_worker.py" proc "$tmp/nb/o2" >"$tmp/nb.out" 2>"$tmp/nb.err")
r=$(cat "$tmp/nb/o2/proc.0" 2>/dev/null) || { cat "$tmp/nb.err"; bad "2: the worker wrote no report"; }
note "2: worker: $(echo "$r" | tr '\n' ';')"
echo "$r" | grep -q "^environ: refused" || bad "2: a worker of the same user opened its agent's /proc environ"
echo "$r" | grep -q "^mem: refused" || bad "2: a worker of the same user opened its agent's /proc mem"

# ---- 3. no secret: the warning, and LIST ----
port=$(free_port)
mkdir -p "$tmp/o3"
note "3: 2-node static job on 127.0.0.1:$port without a token, run id j48p"
for n in 0 1; do
  "$TRUN" --nnodes 2 --node-rank $n --master-addr 127.0.0.1 --master-port "$port" --nproc-per-node 1 \
    --rdzv-id j48p --max-restarts 0 --events "$tmp/ev$n.jsonl" "$W" keys "$tmp/o3" >"$tmp/p$n.out" 2>"$tmp/p$n.err" &
  pids+=($!)
  eval "p$n=\$!"
done
wait_for "[ -f '$tmp/o3/ok.0' ] && [ -f '$tmp/o3/ok.1' ]" 180 || { cat "$tmp/p0.err" "$tmp/p1.err"; bad "3: the workers did not start"; }
keys=$("$STORE_CLI" cli --target "127.0.0.1:$port" --prefix '' list 2>&1)
note "3: LIST: $keys"
case " $keys " in *"/keys48/w0"*"/keys48/w1"* | *"/keys48/w1"*"/keys48/w0"*) ;; *) bad "3: LIST does not show the workers' torch keys" ;; esac
! echo "$keys" | grep -q "/trun/" || bad "3: LIST without the token shows the agents' keys"
go=$("$STORE_CLI" cli --target "127.0.0.1:$port" --prefix '' check /trun/j48p/r0/go 2>&1)
[ "$go" = true ] || bad "3: /trun/j48p/r0/go is not in the store ($go): the LIST check proves nothing"
touch "$tmp/o3/go"
for n in 0 1; do
  eval "p=\$p$n"
  wait_pid_exit "$p" 120 || bad "3: agent $n did not finish"
  [ "${WAIT_RC:-1}" = 0 ] || bad "3: agent $n exited ${WAIT_RC:-?}"
done
c0=$(grep -c "without a secret agent token" "$tmp/p0.err")
c1=$(grep -c "without a secret agent token" "$tmp/p1.err")
e0=$(grep -c '"event":"insecure_token"' "$tmp/ev0.jsonl" 2>/dev/null)
e1=$(grep -c '"event":"insecure_token"' "$tmp/ev1.jsonl" 2>/dev/null)
note "3: warnings: node 0 $c0 line(s), $e0 event(s); node 1 $c1, $e1"
[ "$c0" = 1 ] && [ "$e0" = 1 ] || bad "3: node 0 (the store's host) did not warn once on stderr and once as an event"
[ "$c1" = 0 ] && [ "$e1" = 0 ] || bad "3: node 1 warned too (the warning is once per job)"
grep -q "TRUN_RDZV_TOKEN" "$tmp/p0.err" || bad "3: the warning does not say what to set"

# ---- 4. forged exclusion records ----
port=$(free_port)
mkdir -p "$tmp/o4"
note "4: 2-node c10d job on 127.0.0.1:$port with a token, run id j48c"
c10d() {
  TRUN_RDZV_TOKEN=$tok "$TRUN" --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id j48c \
    --local-addr 127.0.0.1 --nproc-per-node 1 --max-restarts 1 "$W" keys "$tmp/o4" >"$tmp/c$1.out" 2>"$tmp/c$1.err"
}
c10d 0 &
pids+=($!)
q0=$!
wait_for "'$STORE_CLI' cli --target 127.0.0.1:$port --prefix '' check /x >/dev/null 2>&1" 60 || bad "4: node 0's store is not up"
recs=$("$TRUN_HOST_PY" -c '
import json, time
now = time.time()
print(json.dumps([{"host": h, "hostname": n, "instance": "", "gpus": "", "kind": "health", "cause": c, "at": now,
                   "until": now + 1e6}
                  for h, n, c in (("10.9.9.7", "n7", "ecc\x1b[2J\nFAKE LINE"), ("10.9.9.8", "n7 --wrap=id --output=/tmp/x", "x"),
                                  ("10.9.9.9", "gpu[001-512]", "x"))]))')
forged=$("$TRUN_HOST_PY" "$W" forge 127.0.0.1 "$port" "$tok" j48c "$recs")
note "4: forged records: $forged"
case $forged in "written 3") ;; *) bad "4: the test could not write its records as an agent ($forged)" ;; esac
c10d 1 &
pids+=($!)
q1=$!
wait_for "[ -f '$tmp/o4/ok.0' ] && [ -f '$tmp/o4/ok.1' ]" 180 || { cat "$tmp/c0.err" "$tmp/c1.err"; bad "4: the c10d workers did not start"; }
slurm=$("$TRUN" --list-excluded slurm --rdzv-endpoint "127.0.0.1:$port" --rdzv-id j48c --rdzv-backend c10d 2>"$tmp/ls.err")
json=$("$TRUN" --list-excluded json --rdzv-endpoint "127.0.0.1:$port" --rdzv-id j48c --rdzv-backend c10d 2>>"$tmp/ls.err")
note "4: --list-excluded slurm: '$slurm'"
[ "$slurm" = n7 ] || bad "4: --list-excluded slurm printed '$slurm', want n7 (hostile host names left out)"
left=$(echo "$json" | "$TRUN_HOST_PY" -c 'import json,sys; d=json.load(sys.stdin); print(" ".join("%s:%.0f:%s" % (e["hostname"], e["seconds_left"], e["cause"]) for e in d["excluded"]))' 2>&1)
note "4: --list-excluded json: $left"
case $left in 'n7:'*':ecc\x1b[2J\nFAKE LINE') ;; *) bad "4: --list-excluded json is not the one record, escaped ($left)" ;; esac
secs=${left#n7:}; secs=${secs%%:*}
[ "${secs:-0}" -le 1800 ] 2>/dev/null || bad "4: the forged exclusion lasts $secs s, beyond trun_exclude_seconds (1800)"
keys=$("$STORE_CLI" cli --target "127.0.0.1:$port" --prefix '' list 2>&1)
note "4: LIST: $keys"
echo "$keys" | grep -q "/torch.rendezvous.j48c\b" || bad "4: LIST does not show torch's /torch.rendezvous.j48c"
! echo "$keys" | grep -q "/trun" || bad "4: LIST without the token shows the agents' keys"
touch "$tmp/o4/fail" "$tmp/o4/go" # a second round: node 0 read the list before the records were written
for p in $q0 $q1; do
  wait_pid_exit "$p" 120 || bad "4: a c10d agent did not finish"
  [ "${WAIT_RC:-1}" = 0 ] || bad "4: a c10d agent exited ${WAIT_RC:-?}"
done
errs=$(cat "$tmp/c0.err" "$tmp/c1.err")
echo "$errs" | grep -F -q 'is excluded from the job for 1800 s: health: ecc\x1b[2J\nFAKE LINE' ||
  bad "4: node 0 did not name the forged exclusion escaped, for 1800 s: $(echo "$errs" | grep -a 'excluded from the job')"
! printf '%s' "$errs" | grep -q $'\x1b' || bad "4: an agent's stderr holds a raw ESC byte"
! echo "$errs" | grep -q '^FAKE LINE' || bad "4: a forged cause started a line of its own on stderr"
! echo "$errs" | grep -q 'wrap=\|gpu\[' || bad "4: a hostile host name reached stderr as an exclusion"

# ---- 5. --print-config and --dry-run mask the token ----
pc=$("$TRUN" --print-config --rdzv-conf "join_timeout=5,trun_token=$tok" 2>&1)
dr=$(TRUN_RDZV_TOKEN=$tok "$TRUN" --dry-run --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 \
  --rdzv-conf "trun_token=$tok" "$W" 2>&1)
for out in "$pc" "$dr"; do
  ! echo "$out" | grep -q -- "$tok" || bad "5: --print-config / --dry-run printed the token: $(echo "$out" | grep -- "$tok")"
  echo "$out" | grep -q 'trun_token=\*\*\*\*' || bad "5: --print-config / --dry-run does not show trun_token masked"
done
echo "$pc" >"$tmp/pc.yaml"
rc=0
"$TRUN" --config "$tmp/pc.yaml" --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$(free_port)" "$W" >"$tmp/pc.out" 2>"$tmp/pc.err" || rc=$?
[ "$rc" = 2 ] && grep -q "masked" "$tmp/pc.err" || bad "5: the masked token read back exited $rc: $(cat "$tmp/pc.err")"

[ "$failures" = 0 ] || fail "$failures check(s) failed"
echo "PASS"
