#!/usr/bin/env bash
# docs/results.md's results section and the bench scripts that write it (bench/readme.py, bench/gpu.py):
#  1. bench/readme.py --check: the section between the results markers is exactly what the committed result
#     files in bench/results/ give (a result file added, or readme.py changed, without regenerating fails).
#  2. tests/tools/check_bench_py.py: bench/gpu.py's parsing and ratios (ar_lines, vs_torch, gpu_tag,
#     ddp_pairs) on canned worker output, and bench/gpu_topo.py's nvidia-smi parsers on the committed captures.
#  3. readme.py on a README without the markers: exit 1 with the message naming them, file unchanged.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../agent/lib.sh"
py=python3

echo "== 1. docs/results.md's results section vs bench/results"
"$py" "$repo/bench/readme.py" --check || fail "docs/results.md's results section is stale (diff above)"

echo "== 2. bench/gpu.py helpers"
OUT=$tmp/gpu-out "$py" "$repo/tests/tools/check_bench_py.py" || fail "bench/gpu.py helpers (traceback above)"

echo "== 3. a README without the results markers"
printf '# x\n\nno markers here\n' >"$tmp/README.md"
cp "$tmp/README.md" "$tmp/README.orig"
rc=0
"$py" "$repo/bench/readme.py" --readme "$tmp/README.md" 2>"$tmp/err" || rc=$?
[ "$rc" -eq 1 ] || fail "readme.py on a README without markers: exit $rc, want 1"
grep -q 'lacks the results markers <!-- results:cpu:begin -->' "$tmp/err" || fail "message: $(cat "$tmp/err")"
cmp -s "$tmp/README.md" "$tmp/README.orig" || fail "readme.py changed a README without markers"
echo "PASS"
