#!/usr/bin/env bash
# `make release`: trun's four programs built in a Debian bullseye root (glibc 2.31, gcc 10, libuv 1.40),
# with libuv, jansson and libyaml linked statically and glibc dynamically (NVML, CUDA, NCCL and libcurl are
# dlopen'ed, which a static glibc cannot do); fails when a program needs a GLIBC_ symbol version above 2.31.
# Then the tree the tarball, the wheel and the .deb are made from, and the tarball:
#   OUT/stage/trun-VERSION-linux-x86_64/{bin/,share/man/man1/*.1.gz,share/doc/trun/third-party/,README.md,LICENSE}
# (third-party/: the Debian copyright files of the libuv, jansson and libyaml linked in, whose licenses ask
# for their notices in binary copies)
#   dist/trun-VERSION-linux-x86_64.tar.gz
# The root is cached (scripts/debroot.sh; /var/cache/trun/bullseye-build, TRUN_RELEASE_ROOT names another);
# the build runs in a throwaway overlay of it (scripts/root-run.sh) with the source tree bound at /src and
# OUT/build at /out (kept between runs: the inner make is incremental). There is no git in the root: the
# commit comes in as TRUN_COMMIT.
# Usage: scripts/release.sh VERSION COMMIT OUT MANDIR   (make release passes them; MANDIR: build/man)
# Exit codes: 0 built, 1 a step failed (named), 2 bad usage.
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: scripts/release.sh VERSION COMMIT OUT MANDIR" >&2; exit 2; }
version=$1 commit=$2 out=$3 mandir=$4
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${TRUN_RELEASE_ROOT:-/var/cache/trun/bullseye-build}
progs=(trun trun-store trun-topo trun-preflight)
name=trun-$version-linux-x86_64
die() { echo "release: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "the bullseye build root needs root (debootstrap, mount namespaces): run 'sudo make release'"
read -ra pkgs <"$repo/packaging/bullseye-build.list"
"$repo/scripts/debroot.sh" bullseye "$root" "${pkgs[@]}" ||
  die "cannot build the bullseye root at $root (see above)"

mkdir -p "$out/build"
out=$(cd "$out" && pwd)
echo "release: building in the bullseye root ($root), objects in $out/build"
jobs=$(nproc 2>/dev/null || echo 2)
"$repo/scripts/root-run.sh" --hostname trun-release --bind "$repo:/src" --bind "$out/build:/out" "$root" \
  make -C /src --no-print-directory -j"$jobs" B=/out TRUN_COMMIT="$commit" release-bin ||
  die "the build in the bullseye root failed (output above)"

bin=$out/build/release-bin
"$repo/scripts/glibc-check.sh" 2.31 "${progs[@]/#/$bin/}" ||
  die "a program needs a glibc newer than 2.31 (symbols above): it would not start on Debian 11 / Ubuntu 20.04"

stage=$out/stage/$name
rm -rf "$out/stage"
mkdir -p "$stage/bin" "$stage/share/man/man1"
for p in "${progs[@]}"; do
  install -m 0755 "$bin/$p" "$stage/bin/$p"
  [ -f "$mandir/$p.1" ] || die "no man page $mandir/$p.1 (make man)"
  gzip -9n <"$mandir/$p.1" >"$stage/share/man/man1/$p.1.gz"
  chmod 0644 "$stage/share/man/man1/$p.1.gz"
done
install -m 0644 "$repo/README.md" "$repo/LICENSE" "$stage/"
mkdir -p "$stage/share/doc/trun/third-party"
for lib in libuv:libuv1-dev jansson:libjansson-dev libyaml:libyaml-dev; do
  src=$root/usr/share/doc/${lib#*:}/copyright
  [ -f "$src" ] || die "no $src in the build root (its -dev package's copyright file)"
  install -m 0644 "$src" "$stage/share/doc/trun/third-party/${lib%%:*}.copyright"
done

mkdir -p "$repo/dist"
tarball=$repo/dist/$name.tar.gz
# Reproducible: names sorted, owner root, times those of the commit (or of VERSION outside a checkout).
epoch=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || stat -c %Y "$repo/VERSION")
tar -C "$out/stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - "$name" |
  gzip -9n >"$tarball.tmp" || die "cannot write $tarball"
mv "$tarball.tmp" "$tarball"
echo "release: $tarball ($(du -k "$tarball" | cut -f1) KiB)"
