#!/usr/bin/env bash
# `make bench`: every CPU benchmark side by side with torch; prints the tables and ratios, writes
# bench/results/<date>-cpu.json, its plots (bench/plots.py) and the results section of docs/results.md
# (bench/readme.py).
# Never part of `make check`. Extra arguments go to bench/bench.py.
# BENCH_QUICK=1: every benchmark once at its smallest size (about a minute), to check the chain end to end;
# everything it writes (JSON, PNGs, a copy of docs/results.md) goes to build/bench-quick/, the committed files stay.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${TRUN_HOST_PY:-/usr/bin/python3}
if [ "${BENCH_QUICK:-0}" = 1 ]; then
  out=build/bench-quick
  rm -rf "$out"
  mkdir -p "$out"
  "$PY" bench/bench.py --quick --out-dir "$out" "$@"
  json=$(ls "$out"/*-cpu.json)
  "$PY" bench/plots.py "$json"
  cp docs/results.md "$out/results.md"
  "$PY" bench/readme.py --readme "$out/results.md" "$json"
  echo "bench: quick run written to $out/ (the committed results and docs/results.md are untouched)"
else
  "$PY" bench/bench.py "$@"
  "$PY" bench/plots.py
  "$PY" bench/readme.py
fi
