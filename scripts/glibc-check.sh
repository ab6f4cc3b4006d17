#!/usr/bin/env bash
# Fails when a binary needs a glibc symbol version above MAX (objdump -T: the GLIBC_x.y versions of its
# dynamic symbols), so that what we ship starts on the oldest glibc we promise (2.31: Debian 11, Ubuntu 20.04).
# Usage: scripts/glibc-check.sh MAX FILE...   Prints "FILE: GLIBC_x.y" (the highest) per file.
# Exit codes: 0 all within MAX, 1 a file needs more (named, with its symbols above MAX), 2 bad usage / no objdump.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: scripts/glibc-check.sh MAX FILE..." >&2; exit 2; }
command -v objdump >/dev/null || { echo "glibc-check: no objdump (Debian package binutils); run 'make deps'" >&2; exit 2; }
max=$1
shift
bad=0
for f in "$@"; do
  # "GLIBC_x.y symbol" for every versioned dynamic symbol
  syms=$(objdump -T "$f" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\(?GLIBC_[0-9]/) { v = $i; gsub(/[()]/, "", v); print v, $NF } }') ||
    { echo "glibc-check: objdump -T $f failed" >&2; exit 2; }
  top=$(cut -d' ' -f1 <<<"$syms" | sort -u -V | tail -n 1)
  echo "$f: ${top:-no GLIBC_ symbols}"
  above=$(while read -r v sym; do
    if [ -n "$v" ] && [ "$(printf '%s\n' "${v#GLIBC_}" "$max" | sort -V | tail -n 1)" != "$max" ]; then
      echo "  $v $sym"
    fi
  done <<<"$syms" | sort -V)
  if [ -n "$above" ]; then
    echo "glibc-check: $f needs $top, above GLIBC_$max, for:" >&2
    echo "$above" >&2
    bad=1
  fi
done
exit $bad
