#!/usr/bin/env bash
# scripts/root-run.sh, the fresh root that `make check-fresh`, `make release` and tests 86-88 run in, in the
# plain bullseye root that `make deps` caches:
#  1. The command's exit code comes back (7); a --bind shows the host's directory inside.
#  2. The host name and a standard Debian /etc/hosts ("127.0.1.1 NAME"); the root is a mount point (an
#     overlay); its PID 1 is root-run's own shell (it reaps orphans), not the command.
#  3. Whatever joins a mount namespace made inside the root (nsenter -m, as runc exec and podman exec do)
#     stays in the root: it sees the root's files and /proc, not the host's. Under a chroot it landed in
#     the host's / (test 77 in check-fresh listed the machine's processes).
#  4. The command's writes are gone afterwards (the cache stays pristine), and so is every process it left.
#  5. Bad usage exits 2; a missing root 125.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
plain=${TRUN_BULLSEYE_ROOT:-/var/cache/trun/bullseye}
[ -f "$plain/.trun-ready" ] || fail "no plain bullseye root at $plain; run 'make deps' (scripts/debroot.sh bullseye $plain)"
rr=$repo/scripts/root-run.sh
mark=trun-06-$$-$RANDOM
mkdir -p "$tmp/shared"
echo "$mark" >"$tmp/shared/from-host"
echo "$mark" >"$tmp/host-only"

echo "== 1. exit code, --bind"
rc=0
"$rr" --hostname rr-node --bind "$tmp/shared:/mnt/shared" "$plain" /bin/sh -c \
  'cat /mnt/shared/from-host; echo inside >/mnt/shared/from-root; exit 7' >"$tmp/1.out" 2>&1 || rc=$?
cat "$tmp/1.out"
[ "$rc" = 7 ] || fail "1: the command exited 7, root-run $rc"
grep -qx "$mark" "$tmp/1.out" || fail "1: the bound host directory was not visible inside"
[ "$(cat "$tmp/shared/from-root")" = inside ] || fail "1: a write to the bound directory did not reach the host"
echo "ok 1"

echo "== 2. host name, /etc/hosts, the root a mount point, PID 1"
"$rr" --hostname rr-node "$plain" /bin/bash -c '
  echo "hostname $(hostname)"
  grep -P "^127\.0\.1\.1\trr-node$" /etc/hosts
  awk "\$5 == \"/\" {print \"root fs\", \$(NF-2), \$(NF-1)}" /proc/self/mountinfo
  echo "pid1 $(tr "\0\n" "  " </proc/1/cmdline | cut -c1-32)"
  # An orphan: its parent exits at once; PID 1 must reap it once it ends.
  (sleep 0.3 &)
  sleep 1.5
  for d in /proc/[0-9]*; do
    s=$(cat "$d/stat" 2>/dev/null) || continue
    set -- ${s##*) }
    [ "$1" = Z ] && echo "zombie ${d#/proc/}"
  done
  true' >"$tmp/2.out" 2>&1 || { cat "$tmp/2.out"; fail "2: root-run failed"; }
cat "$tmp/2.out"
grep -qx "hostname rr-node" "$tmp/2.out" || fail "2: the host name is not rr-node"
grep -qP "^127\.0\.1\.1\trr-node$" "$tmp/2.out" || fail "2: /etc/hosts lacks the Debian host-name line"
grep -qx "root fs overlay trun-root" "$tmp/2.out" || fail "2: the root is not its own overlay mount"
grep -q "^pid1 /bin/bash -euo pipefail -c" "$tmp/2.out" || fail "2: PID 1 is not root-run's shell"
! grep -q "^zombie" "$tmp/2.out" || fail "2: an orphan was left a zombie: $(grep zombie "$tmp/2.out")"
echo "ok 2"

echo "== 3. joining a mount namespace made inside stays inside"
"$rr" --hostname rr-node "$plain" /bin/bash -c '
  echo "$1" >/root/inside-marker
  unshare --mount --fork sleep 60 &
  p=""
  for i in $(seq 50); do
    for d in /proc/[0-9]*; do [ "$(cat "$d/comm" 2>/dev/null)" = sleep ] && p=${d#/proc/}; done
    [ -n "$p" ] && break
    sleep 0.1
  done
  [ -n "$p" ] || { echo "no sleep process"; exit 1; }
  nsenter -t "$p" -m /bin/sh -c "echo joined-marker \$(cat /root/inside-marker 2>&1); echo joined-pid1 \$(tr \"\\0\\n\" \"  \" </proc/1/cmdline | cut -c1-32); ls $2 2>&1 | sed \"s/^/joined-host /\""
  kill %1
' rr "$mark" "$tmp/host-only" >"$tmp/3.out" 2>&1 || { cat "$tmp/3.out"; fail "3: root-run failed"; }
cat "$tmp/3.out"
grep -qx "joined-marker $mark" "$tmp/3.out" || fail "3: after nsenter -m, the root's own files are gone (it landed outside the root)"
grep -q "^joined-pid1 /bin/bash -euo pipefail -c" "$tmp/3.out" || fail "3: after nsenter -m, /proc is not the root's (PID 1: $(grep joined-pid1 "$tmp/3.out"))"
grep -q "^joined-host .*No such file" "$tmp/3.out" || fail "3: after nsenter -m, the host's $tmp/host-only is visible"
echo "ok 3"

echo "== 4. writes and processes do not outlive the run"
"$rr" "$plain" /bin/sh -c "echo x >/$mark; setsid sleep 600$$ >/dev/null 2>&1 </dev/null & exit 0" ||
  fail "4: root-run failed"
[ ! -e "$plain/$mark" ] || { rm -f "${plain:?}/$mark"; fail "4: a write inside reached the cached root"; }
sleep 0.5
for d in /proc/[0-9]*; do
  [ "$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null)" = "sleep 600$$ " ] && fail "4: a process the command left runs on (pid ${d#/proc/})"
done
echo "ok 4"

echo "== 5. bad usage, no root"
rc=0
"$rr" --frobnicate "$plain" true 2>"$tmp/5.err" || rc=$?
[ "$rc" = 2 ] || fail "5: an unknown option exited $rc, want 2"
grep -q "unknown option '--frobnicate'" "$tmp/5.err" || fail "5: no message: $(cat "$tmp/5.err")"
rc=0
"$rr" "$tmp/no-such-root" true 2>"$tmp/5.err" || rc=$?
[ "$rc" = 125 ] || fail "5: a missing root exited $rc, want 125"
grep -q "no root at" "$tmp/5.err" || fail "5: no message: $(cat "$tmp/5.err")"
echo "ok 5"
echo "PASS: root-run gives a fresh root of its own: exit codes, host name and hosts, PID 1, setns stays inside, nothing outlives it"
