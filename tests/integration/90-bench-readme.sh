#!/usr/bin/env bash
# docs/results.md's results section and the bench scripts that write it (bench/readme.py, bench/gpu.py):
#  1. bench/readme.py --check: the section between the results markers is exactly what the committed result
#     files in bench/results/ give (a result file added, or readme.py changed, without regenerating fails).
#  2. tests/tools/check_bench_py.py: bench/gpu.py's parsing and ratios (ar_lines, vs_torch, gpu_tag,
#     ddp_pairs) on canned worker output, and bench/gpu_topo.py's nvidia-smi parsers on the committed captures.
#  3. readme.py on a README without the markers: exit 1 with the message naming them, file unchanged.
#  4. tests/tools/check_docs.py: every relative link (and #anchor) of README.md, docs/*.md and the other READMEs
#     names an existing file and heading; on a scratch tree with a missing file, a missing heading and a link
#     in a code span, it exits 1 naming exactly the two broken links; docs/testing.md has one row per
#     tests/integration/NN-name.sh and its unit index one row per tests/unit/test_*.c (a scratch tree with a
#     test missing from each table and a row without a test fails naming all four).
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
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

echo "== 4. relative links of the README, docs/ and the other READMEs"
"$py" "$repo/tests/tools/check_docs.py" || fail "broken links in the docs (listed above)"
mkdir -p "$tmp/links/docs"
printf '# T\n\n## Quick start\n\n[ok](docs/a.md#a-page) [ok](#quick-start) `[code](nowhere.md)`\n' \
  >"$tmp/links/README.md"
printf '# A page\n\n[gone](../missing.md) and [bad anchor](../README.md#install)\n' >"$tmp/links/docs/a.md"
rc=0
"$py" "$repo/tests/tools/check_docs.py" --root "$tmp/links" 2>"$tmp/links.err" || rc=$?
cat "$tmp/links.err"
[ "$rc" -eq 1 ] || fail "check_docs.py on broken links: exit $rc, want 1"
grep -q '^docs/a.md:3: ../missing.md: no such file' "$tmp/links.err" || fail "missing file not reported"
grep -q "^docs/a.md:3: ../README.md#install: no heading with id 'install'" "$tmp/links.err" ||
  fail "missing heading not reported"
[ "$(grep -c '^[a-zA-Z/.]*\.md:[0-9]*: ' "$tmp/links.err")" -eq 2 ] || fail "want exactly 2 broken links reported"

echo "== 5. docs/testing.md lists every integration test and every unit test"
mkdir -p "$tmp/rows/docs" "$tmp/rows/tests/integration" "$tmp/rows/tests/unit"
touch "$tmp/rows/tests/integration/10-a.sh" "$tmp/rows/tests/integration/20-b.sh"
touch "$tmp/rows/tests/unit/test_a.c" "$tmp/rows/tests/unit/test_b.c"
printf '# T\n\n| test | what |\n|---|---|\n| `10-a` | a |\n| `30-c` | c |\n' >"$tmp/rows/docs/testing.md"
printf '\n| test | what |\n|---|---|\n| `test_a.c` | a |\n| `test_c.c` | c |\n' >>"$tmp/rows/docs/testing.md"
rc=0
"$py" "$repo/tests/tools/check_docs.py" --root "$tmp/rows" 2>"$tmp/rows.err" || rc=$?
cat "$tmp/rows.err"
[ "$rc" -eq 1 ] || fail "check_docs.py on an incomplete test table: exit $rc, want 1"
grep -q 'tests/integration/20-b.sh has no row' "$tmp/rows.err" || fail "unlisted test not reported"
grep -q 'row `30-c` names no tests/integration/30-c.sh' "$tmp/rows.err" || fail "stale row not reported"
grep -q 'tests/unit/test_b.c has no row in the index of unit tests' "$tmp/rows.err" || fail "unlisted unit test not reported"
grep -q 'row `test_c.c` names no tests/unit/test_c.c' "$tmp/rows.err" || fail "stale unit row not reported"
echo "PASS"
