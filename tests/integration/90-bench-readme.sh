#!/usr/bin/env bash
# docs/results.md's results section and the bench scripts that write it (bench/readme.py, bench/gpu.py):
#  1. bench/readme.py --check: the section between the results markers is exactly what the committed result
#     files in bench/results/ give (a result file added, or readme.py changed, without regenerating fails).
#  2. tests/tools/check_bench_py.py: bench/gpu.py's parsing and ratios (ar_lines, vs_torch, gpu_tag,
#     ddp_pairs) on canned worker output, and bench/gpu_topo.py's nvidia-smi parsers on the committed captures.
#  3. readme.py on a README without the markers: exit 1 with the message naming them, file unchanged.
#  4. tests/tools/check_docs.py: every relative link (and #anchor) of README.md, docs/**/*.md and the Markdown
#     files of config/, k8s/ and examples/ names an existing file and heading of the tree; on a scratch tree
#     with a missing file, a missing heading, a link out of the tree and a link in a code span, it exits 1
#     naming exactly the three broken links; docs/testing.md has one row per tests/integration/NN-name.sh
#     (a scratch tree with a test missing from the table and a row without a test fails naming both).
#  5. The docs stand alone (issue 38): no shipped doc (README.md, docs/ with the man pages, examples/, k8s/,
#     config/README.md, packaging/) and no program output (the four programs' --help, trun --dry-run on this
#     box, trun --explain and trun-topo --json on the p4d node fixture) cites what does not ship: paths
#     outside the tree (../shared, shared/spec, /work/), the project's notes and specifications, section
#     signs, design-note tags, *.md names not in the tree. On a scratch tree with one of each (and harmless
#     look-alikes: --seed, manual_seed, /shared/opt, spec:, H100, NVLink's NV12) it exits 1 naming file:line
#     of each and nothing else.
#  6. docs/testing.md has one row per tests/integration/NN-name.sh and its unit index one row per
#     tests/unit/test_*.c (a scratch tree with a test missing from each table and a row without a test fails
#     naming all four).
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
"$py" "$repo/tests/tools/check_docs.py" || fail "broken links or citations in the docs (listed above)"
mkdir -p "$tmp/links/docs"
printf '# T\n\n## Quick start\n\n[ok](docs/a.md#a-page) [ok](#quick-start) `[code](nowhere.txt)`\n' \
  >"$tmp/links/README.md"
printf '# A page\n\n[gone](../missing.md) and [bad anchor](../README.md#install)\n\n[out](../../etc/passwd)\n' \
  >"$tmp/links/docs/a.md"
rc=0
"$py" "$repo/tests/tools/check_docs.py" --root "$tmp/links" 2>"$tmp/links.err" || rc=$?
cat "$tmp/links.err"
[ "$rc" -eq 1 ] || fail "check_docs.py on broken links: exit $rc, want 1"
grep -q '^docs/a.md:3: ../missing.md: no such file' "$tmp/links.err" || fail "missing file not reported"
grep -q "^docs/a.md:3: ../README.md#install: no heading with id 'install'" "$tmp/links.err" ||
  fail "missing heading not reported"
grep -q '^docs/a.md:5: ../../etc/passwd: points outside the tree' "$tmp/links.err" || fail "link out of the tree"
[ "$(grep -c '^[a-zA-Z/.]*\.md:[0-9]*: ' "$tmp/links.err")" -eq 3 ] || fail "want exactly 3 broken links reported"

echo "== 5. the shipped docs and the programs' output cite nothing outside the tree"
for p in trun trun-store trun-topo trun-preflight; do
  "$build/$p" --help >"$tmp/help-$p.txt" 2>&1 || fail "$p --help: exit $? ($(tail -1 "$tmp/help-$p.txt"))"
done
# --explain and trun-topo --json on the p4d node fixture (fake NVML): every NCCL / EFA decision with its reason.
fx=$repo/tests/fixtures/nodes/p4d.24xlarge
on_p4d() {
  env -i PATH="$PATH" TRUN_SYSFS_ROOT="$fx/sys" TRUN_DEV_ROOT="$fx/dev" TRUN_DMI_ROOT="$fx/dmi" \
    TRUN_NVML_LIBRARY="$build/libnvidia-ml-fake.so" TRUN_FAKE_NVML_TOPO="$fx/nvml.json" "$@"
}
on_p4d "$build/trun" --explain --no-imds >"$tmp/explain.txt" 2>&1 || fail "trun --explain: exit $?"
grep -q '^  FI_PROVIDER=efa' "$tmp/explain.txt" || fail "trun --explain on the p4d fixture: no FI_PROVIDER row"
on_p4d "$build/trun-topo" --json --no-imds >"$tmp/topo.json" 2>&1 || fail "trun-topo --json: exit $?"
(cd "$repo" && "$build/trun" --dry-run --nproc-per-node 2 examples/allreduce.py) >"$tmp/dryrun.txt" 2>&1 ||
  fail "trun --dry-run: exit $? ($(tail -1 "$tmp/dryrun.txt"))"
texts=()
for p in trun trun-store trun-topo trun-preflight; do texts+=(--text "$p --help=$tmp/help-$p.txt"); done
"$py" "$repo/tests/tools/check_docs.py" "${texts[@]}" --text "trun --explain=$tmp/explain.txt" \
  --text "trun-topo --json=$tmp/topo.json" \
  --text "trun --dry-run=$tmp/dryrun.txt" || fail "the docs or the programs' output cite what does not ship"
s=$tmp/cites
mkdir -p "$s/docs/man" "$s/examples/x" "$s/k8s" "$s/packaging"
printf '# Cites\n\nSee `shared/spec/gpu-efa-nccl.md` for it.\nfine: /shared/opt/trun and --seed 3\n' >"$s/README.md"
printf '# P\n\nAs the seeds measured.\nOur rule (O1, O7) holds.\nThe H100 (x1) box, GPUs 0-1 (NV12).\n' >"$s/docs/p.md"
printf '.TH T 1\nsee section \\(sc3 of it\ntorch.manual_seed(args.seed)\n' >"$s/docs/man/t.1"
printf '# from ../shared/seeds/x.txt\nimport random\n' >"$s/examples/x/run.py"
printf 'spec:\n  # the spec says so\n' >"$s/k8s/job.yaml"
printf 'Description: see /work/main and tcpstore-protocol.md, not docs/p.md\n' >"$s/packaging/control"
printf 'reason: \xc2\xa72 of the notes\n' >"$s/out.txt"
rc=0
"$py" "$repo/tests/tools/check_docs.py" --root "$s" --text "trun --help=$s/out.txt" 2>"$s.err" || rc=$?
cat "$s.err"
[ "$rc" -eq 1 ] || fail "check_docs.py on citations: exit $rc, want 1"
for want in "README.md:3: 'shared/spec'" "README.md:3: 'shared/spec/gpu-efa-nccl.md': no such Markdown" \
  "docs/p.md:3: 'seeds'" "docs/p.md:4: '(O1, O7)'" "docs/man/t.1:2: '\\(sc'" "examples/x/run.py:1: '../shared'" "examples/x/run.py:1: 'seeds'" \
  "k8s/job.yaml:2: 'the spec'" "packaging/control:1: '/work/'" "packaging/control:1: 'tcpstore-protocol.md'" \
  "trun --help:1: '§'"; do
  grep -qF -- "$want" "$s.err" || fail "check_docs.py did not report $want"
done
[ "$(grep -c "^[a-zA-Z0-9/. _-]*:[0-9]*: '" "$s.err")" -eq 11 ] || fail "want exactly 11 citations reported"

echo "== 6. docs/testing.md lists every integration test and every unit test"
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
