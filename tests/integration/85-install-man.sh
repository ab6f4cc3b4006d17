#!/usr/bin/env bash
# runner: lock=dist
# make install / make uninstall and the man pages:
#  1. make install DESTDIR=D PREFIX=/opt/trun puts trun, trun-store, trun-topo, trun-preflight in bin/ and
#     their four man pages in share/man/man1/, nothing else; each program's --version is one line with its
#     name, the VERSION file's version and (in a git checkout) the commit.
#  2. Every option each program's --help lists (trun-store: each command's; trun-topo: also 'preflight')
#     is in its man page (tests/tools/man_options.py); man renders each page without a warning and
#     `man -w` finds them under the PREFIX.
#  3. make uninstall removes every file install added.
#  4. A PREFIX that cannot be written (a read-only bind mount, so that root too is refused): exit non-zero,
#     nothing installed, the message names the directory.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
command -v man >/dev/null || fail "no man (Debian package man-db); run 'make deps'"
make_in_repo() { make -C "$repo" --no-print-directory B="$build" "$@"; }
progs=(trun trun-store trun-topo trun-preflight)
version=$(cat "$repo/VERSION")

echo "== 1. make install DESTDIR=$tmp/d PREFIX=/opt/trun"
make_in_repo install DESTDIR="$tmp/d" PREFIX=/opt/trun >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "make install failed"; }
(cd "$tmp/d" && find . -type f | sort) >"$tmp/files"
printf './opt/trun/bin/%s\n' "${progs[@]}" >"$tmp/want"
printf './opt/trun/share/man/man1/%s.1\n' "${progs[@]}" >>"$tmp/want"
sort -o "$tmp/want" "$tmp/want"
diff -u "$tmp/want" "$tmp/files" || fail "make install put other files than the 4 programs and 4 man pages"
commit=""
[ -e "$repo/.git" ] && commit=$(git -C "$repo" rev-parse --short=12 HEAD)
for p in "${progs[@]}"; do
  bin=$tmp/d/opt/trun/bin/$p
  [ -x "$bin" ] || fail "$bin is not executable"
  "$bin" --version >"$tmp/ver" 2>&1 || fail "$p --version exited $?: $(cat "$tmp/ver")"
  [ "$(wc -l <"$tmp/ver")" -eq 1 ] || fail "$p --version printed more than one line: $(cat "$tmp/ver")"
  grep -q "^$p $version\( (git $commit\(-dirty\)\?)\)\?\$" "$tmp/ver" || fail "$p --version: '$(cat "$tmp/ver")'"
  [ -z "$commit" ] || grep -q "(git $commit" "$tmp/ver" || fail "$p --version lacks the commit $commit"
  echo "ok: $(cat "$tmp/ver")"
done

echo "== 2. man pages: every --help option, no warnings, found by man -w"
bin=$tmp/d/opt/trun/bin
man1=$tmp/d/opt/trun/share/man/man1
"$bin/trun" --help >"$tmp/h.trun"
"$bin/trun-store" --help >"$tmp/h.store"
for c in serve bench cli; do "$bin/trun-store" $c --help >"$tmp/h.store.$c"; done
"$bin/trun-topo" --help >"$tmp/h.topo"
"$bin/trun-topo" preflight --help >"$tmp/h.topo.pf"
"$bin/trun-preflight" --help >"$tmp/h.pf"
chk() { "$host_py" "$repo/tests/tools/man_options.py" "$@" || fail "$1 lacks options that --help lists"; }
chk "$man1/trun.1" "$tmp/h.trun"
chk "$man1/trun-store.1" "$tmp/h.store" "$tmp"/h.store.*
chk "$man1/trun-topo.1" "$tmp/h.topo" "$tmp/h.topo.pf"
chk "$man1/trun-preflight.1" "$tmp/h.pf"
for p in "${progs[@]}"; do
  MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings -l "$man1/$p.1" >"$tmp/man.txt" 2>"$tmp/man.err" || fail "man -l $p.1 failed"
  [ ! -s "$tmp/man.err" ] || fail "man warns about $p.1: $(cat "$tmp/man.err")"
  grep -q "^NAME" "$tmp/man.txt" && grep -q "EXIT STATUS" "$tmp/man.txt" || fail "$p.1 lacks NAME or EXIT STATUS"
  grep -q "trun $version" "$tmp/man.txt" || fail "$p.1's footer does not carry version $version"
  found=$(MANPATH=$tmp/d/opt/trun/share/man man -w "$p") || fail "man -w $p found nothing under the PREFIX"
  [ "$found" = "$man1/$p.1" ] || fail "man -w $p: $found"
done
echo "ok: 4 man pages"

echo "== 3. make uninstall"
make_in_repo uninstall DESTDIR="$tmp/d" PREFIX=/opt/trun >"$tmp/uninstall.log" 2>&1 || { cat "$tmp/uninstall.log"; fail "make uninstall failed"; }
left=$(find "$tmp/d" -type f)
[ -z "$left" ] || fail "make uninstall left: $left"
echo "ok: no file left"

echo "== 4. a PREFIX that cannot be written"
mkdir -p "$tmp/ro"
rc=0
unshare --mount --propagation private -- /bin/sh -c '
  mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" || exit 125
  shift; exec "$@"' sh "$tmp/ro" make -C "$repo" --no-print-directory B="$build" install PREFIX="$tmp/ro/usr" \
  >"$tmp/ro.out" 2>"$tmp/ro.err" || rc=$?
[ "$rc" -ne 125 ] || fail "could not make a read-only bind mount for the test"
[ "$rc" -ne 0 ] || fail "make install into a read-only PREFIX succeeded"
grep -q "cannot write to $tmp/ro/usr/bin" "$tmp/ro.err" || fail "the error does not name the PREFIX: $(cat "$tmp/ro.err")"
[ -z "$(find "$tmp/ro" -mindepth 1)" ] || fail "something was written under the read-only PREFIX"
echo "ok: $(head -n 1 "$tmp/ro.err")"
echo PASS
