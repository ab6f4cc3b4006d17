#!/usr/bin/env bash
# `make install` / `make uninstall`: copies trun's programs into ROOT/bin and their man pages (one per
# program, PROGRAM.1) into ROOT/share/man/man1, or removes exactly those files. ROOT is $(DESTDIR)$(PREFIX).
# Usage: scripts/install.sh install|uninstall ROOT BUILD_DIR   (programs and man/*.1 come from BUILD_DIR)
# Exit codes: 0 done, 1 ROOT cannot be written or a copy / removal failed (named on stderr), 2 bad usage.
set -euo pipefail
progs=(trun trun-store trun-topo trun-preflight)
[ $# -eq 3 ] || { echo "usage: scripts/install.sh install|uninstall ROOT BUILD_DIR" >&2; exit 2; }
action=$1 root=$2 build=$3
case $root in /*) ;; *) echo "install: PREFIX (with DESTDIR) must be an absolute path, not '$root'" >&2; exit 2 ;; esac
bindir=$root/bin mandir=$root/share/man/man1

# The deepest directory of PATH that exists must be writable (a new PREFIX is made below it).
writable() {
  local d=$1
  while [ ! -e "$d" ]; do d=$(dirname "$d"); done
  [ -d "$d" ] && [ -w "$d" ] || {
    echo "install: cannot write to $1 ($d is not a writable directory): run 'sudo make $action', or choose" \
      "another place with PREFIX=... (e.g. PREFIX=\$HOME/.local)" >&2
    exit 1
  }
}

case $action in
  install)
    for p in "${progs[@]}"; do
      [ -x "$build/$p" ] || { echo "install: $build/$p is missing; run 'make' first" >&2; exit 1; }
      [ -f "$build/man/$p.1" ] || { echo "install: $build/man/$p.1 is missing; run 'make man'" >&2; exit 1; }
    done
    writable "$bindir"
    writable "$mandir"
    mkdir -p "$bindir" "$mandir" || { echo "install: cannot create $bindir or $mandir" >&2; exit 1; }
    for p in "${progs[@]}"; do
      install -m 0755 "$build/$p" "$bindir/$p" || { echo "install: cannot copy $p to $bindir" >&2; exit 1; }
      echo "  INSTALL $bindir/$p"
    done
    for p in "${progs[@]}"; do
      install -m 0644 "$build/man/$p.1" "$mandir/$p.1" || { echo "install: cannot copy $p.1 to $mandir" >&2; exit 1; }
      echo "  INSTALL $mandir/$p.1"
    done
    ;;
  uninstall)
    writable "$bindir"
    writable "$mandir"
    for p in "${progs[@]}"; do
      for f in "$bindir/$p" "$mandir/$p.1"; do
        [ ! -e "$f" ] || rm -f "$f" || { echo "install: cannot remove $f" >&2; exit 1; }
      done
    done
    echo "  UNINSTALL ${progs[*]} and their man pages from $root"
    ;;
  *) echo "usage: scripts/install.sh install|uninstall ROOT BUILD_DIR" >&2; exit 2 ;;
esac
