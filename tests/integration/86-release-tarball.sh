#!/usr/bin/env bash
# runner: lock=dist
# make release: dist/trun-VERSION-linux-x86_64.tar.gz, built in the Debian bullseye root (glibc 2.31).
#  1. The tarball holds exactly bin/{trun,trun-store,trun-topo,trun-preflight}, share/man/man1/*.1.gz,
#     share/doc/trun/third-party/{libuv,jansson,libyaml}.copyright, README.md and LICENSE under
#     trun-VERSION-linux-x86_64/; no program needs a GLIBC_ version above 2.31 (scripts/glibc-check.sh,
#     objdump -T; it rejects build/trun when the host's glibc is newer) nor any shared library but glibc's
#     (libuv, jansson, libyaml are inside; NVML, CUDA, NCCL, libcurl are dlopen'ed).
#  2. In a plain Debian bullseye root (debootstrap minbase: glibc 2.31, no libuv, no Python), the tarball's
#     trun prints its version and runs a no-op 2-worker job (--standalone --no-python /bin/sh).
#  3. In the torch 2.6 trixie root, the tarball's trun runs a 2-worker gloo all-reduce (examples/allreduce.py).
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_chroot
plain=${TRUN_BULLSEYE_ROOT:-/var/cache/trun/bullseye}
[ -f "$plain/.trun-ready" ] || fail "no plain bullseye root at $plain; run 'make deps' (scripts/debroot.sh bullseye $plain)"
version=$(cat "$repo/VERSION")
name=trun-$version-linux-x86_64
progs=(trun trun-store trun-topo trun-preflight)

echo "== 1. make release"
make -C "$repo" --no-print-directory B="$build" release >"$tmp/release.log" 2>&1 || { tail -n 40 "$tmp/release.log"; fail "make release failed"; }
sed 's/^/    /' "$tmp/release.log" | grep -E '(release|GLIBC)' || true
tarball=$repo/dist/$name.tar.gz
[ -f "$tarball" ] || fail "make release did not write $tarball"
tar -tzf "$tarball" | grep -v '/$' | sort >"$tmp/list"
{
  printf '%s/LICENSE\n%s/README.md\n' "$name" "$name"
  printf "$name/bin/%s\n" "${progs[@]}"
  printf "$name/share/man/man1/%s.1.gz\n" "${progs[@]}"
  printf "$name/share/doc/trun/third-party/%s.copyright\n" libuv jansson libyaml
} | sort >"$tmp/want"
diff -u "$tmp/want" "$tmp/list" || fail "the tarball holds other files than expected"
mkdir -p "$tmp/x"
tar -C "$tmp/x" -xzf "$tarball"
top=$tmp/x/$name
"$repo/scripts/glibc-check.sh" 2.31 "${progs[@]/#/$top/bin/}" || fail "a program needs a glibc above 2.31"
# The check can fail: a program built on this host needs this host's newer glibc (2.34+ on bookworm).
host_glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
if [ "$(printf '%s\n' "$host_glibc" 2.31 | sort -V | tail -n 1)" != 2.31 ] && [ -x "$build/trun" ]; then
  rc=0
  "$repo/scripts/glibc-check.sh" 2.31 "$build/trun" >"$tmp/gc.out" 2>&1 || rc=$?
  [ $rc -eq 1 ] || fail "glibc-check passed $build/trun, built against glibc $host_glibc: $(cat "$tmp/gc.out")"
  echo "ok: glibc-check rejects build/trun (host glibc $host_glibc): $(grep -m1 needs "$tmp/gc.out")"
fi
for p in "${progs[@]}"; do
  needed=$(objdump -p "$top/bin/$p" | awk '$1 == "NEEDED" { print $2 }' | sort | tr '\n' ' ')
  for lib in $needed; do
    case $lib in libc.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | libm.so.6) ;;
      *) fail "$p needs $lib (only glibc's libraries may be linked dynamically)" ;; esac
  done
  echo "ok: $p: $(du -k "$top/bin/$p" | cut -f1) KiB, needs $needed"
done
echo "ok: $(du -k "$tarball" | cut -f1) KiB tarball"

echo "== 2. plain bullseye root: trun --version and a no-op 2-worker job"
"$repo/scripts/root-run.sh" --hostname bullseye-node --bind "$top:/opt/trun" "$plain" /bin/sh -c '
  ldd --version | head -n 1
  /opt/trun/bin/trun --version
  /opt/trun/bin/trun --standalone --nproc-per-node 2 --no-python /bin/sh -c "echo worker rank \$RANK of \$WORLD_SIZE local \$LOCAL_RANK"
' >"$tmp/bullseye.out" 2>&1 || { cat "$tmp/bullseye.out"; fail "the tarball's trun failed in the bullseye root"; }
sed 's/^/    /' "$tmp/bullseye.out"
grep -q 'GLIBC 2.31' "$tmp/bullseye.out" || fail "the bullseye root does not have glibc 2.31"
grep -q "^trun $version" "$tmp/bullseye.out" || fail "trun --version in bullseye"
for r in 0 1; do
  grep -q "worker rank $r of 2 local $r" "$tmp/bullseye.out" || fail "worker $r did not run in bullseye"
done

echo "== 3. torch 2.6 trixie root: a 2-worker gloo all-reduce"
run_pg "$repo/scripts/chroot-run.sh" "$top/bin/trun" --standalone --nproc-per-node 2 /trun/examples/allreduce.py \
  >"$tmp/trixie.out" 2>&1 || { cat "$tmp/trixie.out"; fail "the tarball's trun failed the gloo job in the trixie root"; }
sed 's/^/    /' "$tmp/trixie.out"
for r in 0 1; do
  grep -q "rank $r/2 .*OK" "$tmp/trixie.out" || fail "rank $r did not report a correct all-reduce"
done
echo PASS
