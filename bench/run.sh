#!/usr/bin/env bash
# `make bench`: every CPU benchmark side by side with torch; prints the tables and ratios and writes
# bench/results/<date>-cpu.json. Never part of `make check`. Extra arguments go to bench/bench.py.
set -euo pipefail
cd "$(dirname "$0")/.."
"${TRUN_HOST_PY:-/usr/bin/python3}" bench/bench.py "$@"
"${TRUN_HOST_PY:-/usr/bin/python3}" bench/readme.py
