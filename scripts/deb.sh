#!/usr/bin/env bash
# `make deb`: dist/trun_VERSION_amd64.deb from the release tree (the tarball's programs, man pages and
# third-party notices), with packaging/deb/control.in and packaging/deb/copyright; built with dpkg-deb as
# root:root, then checked with lintian (errors fail the build; warnings and the rest are printed).
# Usage: scripts/deb.sh VERSION TREE OUTDIR   (TREE: an unpacked trun-VERSION-linux-x86_64/)
# Environment: SOURCE_DATE_EPOCH (the changelog's date and the files' times).
# Exit codes: 0 built and without lintian errors, 1 a step failed (named), 2 bad usage.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: scripts/deb.sh VERSION TREE OUTDIR" >&2; exit 2; }
version=$1 tree=$2 outdir=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
progs=(trun trun-store trun-topo trun-preflight)
die() { echo "deb: $*" >&2; exit 1; }
command -v dpkg-deb >/dev/null || die "no dpkg-deb (Debian package dpkg)"
command -v lintian >/dev/null || die "no lintian; run 'make deps' (Debian package lintian)"
epoch=${SOURCE_DATE_EPOCH:-$(stat -c %Y "$repo/VERSION")}

root=$(mktemp -d "${TMPDIR:-/tmp}/trun-deb.XXXXXX")
trap 'rm -rf "$root"' EXIT
pkg=$root/trun
doc=$pkg/usr/share/doc/trun
mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/share/man/man1" "$doc/third-party"
for p in "${progs[@]}"; do
  [ -x "$tree/bin/$p" ] || die "$tree/bin/$p is missing (make release)"
  install -m 0755 "$tree/bin/$p" "$pkg/usr/bin/$p"
  install -m 0644 "$tree/share/man/man1/$p.1.gz" "$pkg/usr/share/man/man1/$p.1.gz"
done
install -m 0644 "$repo/packaging/deb/copyright" "$doc/copyright"
install -D -m 0644 "$repo/packaging/deb/lintian-overrides" "$pkg/usr/share/lintian/overrides/trun"
install -m 0644 "$tree"/share/doc/trun/third-party/*.copyright "$doc/third-party/"
# A native package's changelog: this version, dated as the commit.
printf 'trun (%s) unstable; urgency=medium\n\n  * Release %s; see README.md.\n\n -- %s  %s\n' "$version" "$version" \
  "$(sed -n 's/^Maintainer: //p' "$repo/packaging/deb/control.in")" "$(LC_ALL=C date -u -R -d "@$epoch")" |
  gzip -9n >"$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"
size=$(du -sk --apparent-size "$pkg/usr" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@INSTALLED_SIZE@/$size/" "$repo/packaging/deb/control.in" >"$pkg/DEBIAN/control"
(cd "$pkg" && find usr -type f | LC_ALL=C sort | xargs md5sum) >"$pkg/DEBIAN/md5sums"
chmod 0644 "$pkg/DEBIAN/control" "$pkg/DEBIAN/md5sums"
find "$pkg" -type d -exec chmod 0755 {} +
find "$pkg" -exec touch -h -d "@$epoch" {} +

deb=$root/trun_${version}_amd64.deb
SOURCE_DATE_EPOCH=$epoch dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null ||
  die "dpkg-deb --build failed"

# lintian: every tag shown (info, pedantic, experimental, and the overridden ones as O:), then a second run
# whose exit status decides (--show-overrides makes an overridden error count): 2 = errors, which fail the
# build. The one override (packaging/deb/lintian-overrides) says why libyaml is linked in.
lintian --display-info --display-experimental --pedantic --show-overrides --tag-display-limit 0 "$deb" \
  >"$root/lintian.out" 2>&1 || true
grep -v '^running with root privileges' "$root/lintian.out" | sed 's/^/lintian: /' || true
rc=0
lintian --fail-on error "$deb" >/dev/null 2>&1 || rc=$?
[ $rc -eq 0 ] || die "lintian reports errors for ${deb##*/} (exit $rc; tags above); not written to $outdir"
mkdir -p "$outdir"
mv "$deb" "$outdir/"
echo "deb: $outdir/${deb##*/} ($(du -k "$outdir/${deb##*/}" | cut -f1) KiB)"
echo "deb: lintian: $(grep -c '^E: ' "$root/lintian.out" || true) errors, $(grep -c '^W: ' "$root/lintian.out" || true) warnings, $(grep -c '^[IPX]: ' "$root/lintian.out" || true) info/pedantic/experimental, $(grep -c '^O: ' "$root/lintian.out" || true) overridden"
