#!/usr/bin/env bash
# runner: lock=dist
# make deb: dist/trun_VERSION_amd64.deb, lintian without errors (every tag shown; scripts/deb.sh also fails the
# build on one),
# installed with apt in a fresh Debian bookworm root (debootstrap minbase, /var/cache/trun/bookworm-fresh, in a
# throwaway overlay; man-db installed first so that `man -w` can be asked, its .debs cached in
# /var/cache/trun/apt-archives/bookworm):
#  1. control: Depends is libc6 (>= 2.31) only, Suggests libcurl4; the package holds the four programs,
#     their man pages, copyright (BSD-3-Clause) and changelog.
#  2. apt-get install ./trun_VERSION_amd64.deb installs trun and nothing else; trun --version, man -w for
#     each program, a no-op 2-worker job (--standalone --no-python /bin/sh).
#  3. apt-get remove trun: the package is gone (dpkg: not installed) and /usr, /etc, /opt and dpkg's info
#     files are exactly as before the install.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
fresh=${TRUN_BOOKWORM_ROOT:-/var/cache/trun/bookworm-fresh}
[ -f "$fresh/.trun-ready" ] || fail "no bookworm root at $fresh; run 'make deps' (scripts/debroot.sh bookworm $fresh git make)"
version=$(cat "$repo/VERSION")
deb=$repo/dist/trun_${version}_amd64.deb
debs=/var/cache/trun/apt-archives/bookworm

echo "== make deb (lintian)"
make -C "$repo" --no-print-directory B="$build" deb >"$tmp/deb.log" 2>&1 || { tail -n 40 "$tmp/deb.log"; fail "make deb failed"; }
[ -f "$deb" ] || fail "make deb did not write $deb"
command -v lintian >/dev/null || fail "no lintian; run 'make deps'"
lintian --display-info --display-experimental --pedantic --show-overrides "$deb" >"$tmp/lintian" 2>&1 || true
grep -v '^running with root' "$tmp/lintian" | sed 's/^/    lintian: /' || true
grep -q '^E: ' "$tmp/lintian" && fail "lintian reports errors"
lintian --fail-on error "$deb" >/dev/null 2>&1 || fail "lintian --fail-on error exits $?"

echo "== 1. control and contents"
dpkg-deb -f "$deb" Package Version Architecture Depends Suggests | sed 's/^/    /'
[ "$(dpkg-deb -f "$deb" Depends)" = "libc6 (>= 2.31)" ] || fail "Depends: $(dpkg-deb -f "$deb" Depends)"
[ "$(dpkg-deb -f "$deb" Suggests)" = "libcurl4" ] || fail "Suggests: $(dpkg-deb -f "$deb" Suggests)"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "Version: $(dpkg-deb -f "$deb" Version)"
dpkg-deb -c "$deb" | awk '{print $6}' | grep -v '/$' | sort >"$tmp/contents"
{
  printf './usr/bin/%s\n' trun trun-store trun-topo trun-preflight
  printf './usr/share/man/man1/%s.1.gz\n' trun trun-store trun-topo trun-preflight
  printf './usr/share/doc/trun/%s\n' copyright changelog.gz third-party/{libuv,jansson,libyaml}.copyright
  echo ./usr/share/lintian/overrides/trun
} | sort | diff -u - "$tmp/contents" || fail "the package holds other files than expected"
# Read whole first: grep -q stops at the first match, and with pipefail tar's SIGPIPE then failed the check.
copyright=$(dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./usr/share/doc/trun/copyright) || fail "no copyright file"
grep -q '^License: BSD-3-Clause' <<<"$copyright" || fail "copyright does not name BSD-3-Clause"
echo "ok: $(du -k "$deb" | cut -f1) KiB"

mkdir -p "$debs/partial"
cp "$deb" "$tmp/"
cat >"$tmp/inner.sh" <<'INNER'
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
aget() { apt-get -o DPkg::Lock::Timeout=600 -y -q --no-install-recommends "$@"; }
{ aget install man-db || { apt-get -qq update && aget install man-db; }; } >/t/man-db.log 2>&1 || { cat /t/man-db.log; exit 3; }
snap() { find /usr /etc /opt /var/lib/dpkg/info -xdev ! -type d | LC_ALL=C sort >"/t/$1"; }
snap before
echo "\$ apt-get install ./$DEB"
aget install "/t/$DEB" 2>&1 | tee /t/install.log | grep -E '^(The following NEW|  trun|[0-9]+ upgraded|Setting up trun)' || true
echo "\$ trun --version"; trun --version | tee /t/version
for p in trun trun-store trun-topo trun-preflight; do echo "\$ man -w $p"; man -w "$p"; done | tee /t/man
echo "\$ trun --standalone --nproc-per-node 2 --no-python /bin/sh -c 'echo worker \$RANK of \$WORLD_SIZE'"
cd /tmp && trun --standalone --nproc-per-node 2 --no-python /bin/sh -c 'echo worker $RANK of $WORLD_SIZE' 2>&1 | grep worker | sort | tee /t/job
echo "\$ apt-get remove trun"
aget remove trun 2>&1 | tee /t/remove.log | grep -E '^(Removing|[0-9]+ upgraded)' || true
dpkg-query -W -f='${db:Status-Abbrev}\n' trun >/t/status 2>&1 || true
snap after
INNER
echo "== 2./3. apt-get install, use, apt-get remove (fresh bookworm root)"
run_pg "$repo/scripts/root-run.sh" --hostname bookworm-deb --bind "$tmp:/t" --bind "$debs:/var/cache/apt/archives" \
  "$fresh" /usr/bin/env DEB="$(basename "$deb")" /bin/bash /t/inner.sh >"$tmp/inner.out" 2>&1 ||
  { cat "$tmp/inner.out"; fail "the apt steps failed (output above)"; }
sed 's/^/    /' "$tmp/inner.out"
grep -A1 '^The following NEW packages will be installed' "$tmp/install.log" | tail -n 1 | grep -qx ' *trun' ||
  fail "apt installed more than trun: $(cat "$tmp/install.log")"
grep -q "^trun $version" "$tmp/version" || fail "trun --version: $(cat "$tmp/version")"
for p in trun trun-store trun-topo trun-preflight; do
  grep -qx "/usr/share/man/man1/$p.1.gz" "$tmp/man" || fail "man -w $p did not find /usr/share/man/man1/$p.1.gz"
done
printf 'worker 0 of 2\nworker 1 of 2\n' | diff -u - "$tmp/job" || fail "the no-op 2-worker job"
grep -q '^Removing trun' "$tmp/remove.log" || fail "apt-get remove did not remove trun"
[ ! -s "$tmp/status" ] || grep -qv '^ii' "$tmp/status" || fail "dpkg still lists trun as installed: $(cat "$tmp/status")"
diff -u "$tmp/before" "$tmp/after" || fail "apt-get remove trun left files (or removed others)"
echo "ok: apt-get remove trun left nothing of it"
echo PASS
