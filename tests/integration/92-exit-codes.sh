#!/usr/bin/env bash
# trun's exit code table (base/exit.h) is kept by every path and said the same everywhere:
#  1. `trun --help` prints the table; README.md, docs/cli.md, the man page docs/man/trun.1, k8s/README.md and
#     docs/torchrun-compat.md (the migration guide)
#     carry each code with the same short meaning (compared after dropping Markdown / roff markup); the
#     Kubernetes podFailurePolicy rules in k8s/README.md, docs/health.md and docs/supervision.md fail the job
#     on 2 and 5 only and ignore 3 (and 4) only; the Slurm drain rules (docs/health.md,
#     examples/slurm/README.md) drain on 3 only.
#  2. --hostfile passes an agent's code through (a fake --rsh, tests/helpers/code_rsh.sh, whose hosts exit
#     the code their name asks for): a lone host's 3, 4, 5, 6, 2 as they are, ssh's 255 and a signal as 1;
#     several hosts: the first in the order 2 > 5 > 3 > 6 > 4 > 1, whatever order they end in, and the
#     launcher names the host.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun

# ---- 1. the table and the documents ----
"$trun" --help >"$tmp/help" || fail "trun --help exited $?"
"$host_py" - "$tmp/help" "$repo" <<'PY' || fail "the documents do not carry --help's exit code table"
import re, sys
help_text, repo = open(sys.argv[1]).read(), sys.argv[2]
sec = help_text.split("\nexit codes:\n", 1)
assert len(sec) == 2, "no 'exit codes:' section in --help"
table = {}
for m in re.finditer(r"^  (\d+) +(.*(?:\n {10,}.*)*)", sec[1], re.M):
    text = " ".join(m.group(2).split())
    table[int(m.group(1))] = text.split(" (", 1)[0]
assert sorted(table) == list(range(7)), "--help's codes: %s" % sorted(table)
print("--help:", table)

def norm(path):
    t = open(path).read()
    if path.endswith(".1"):
        t = re.sub(r"^\.(TP|PP|IP)\s*$", " ", t, flags=re.M)
        t = re.sub(r"^\.[BI]R? ", "", t, flags=re.M).replace("\\-", "-").replace("\\(em", "-")
    t = re.sub(r"[|`*]", " ", t)
    return " ".join(t.split()).lower()

bad = 0
for doc in ("README.md", "docs/cli.md", "docs/man/trun.1", "k8s/README.md", "docs/torchrun-compat.md"):
    t = norm("%s/%s" % (repo, doc))
    for code, meaning in sorted(table.items()):
        if ("%d %s" % (code, meaning)).lower() not in t:
            print("FAIL: %s does not say '%d %s'" % (doc, code, meaning)); bad += 1
    print("%s: every code with --help's meaning" % doc)

# podFailurePolicy rules: FailJob on 2 and 5 only, Ignore on 3 and 4 only (never 1, 6: they count).
for doc in ("k8s/README.md", "docs/health.md", "docs/supervision.md"):
    t = open("%s/%s" % (repo, doc)).read()
    rules = re.findall(r"action: (\w+).*?values: \[([\d, ]+)\]", t, re.S)
    assert rules, "%s: no podFailurePolicy rule" % doc
    for action, values in rules:
        vals = {int(v) for v in values.split(",")}
        allowed = {"FailJob": {2, 5}, "Ignore": {3, 4}}.get(action, set())
        if not vals <= allowed:
            print("FAIL: %s: %s on %s (the table allows %s)" % (doc, action, sorted(vals), sorted(allowed))); bad += 1
    print("%s: podFailurePolicy %s" % (doc, rules))
# Slurm drain rules: on 3 only.
for doc in ("docs/health.md", "examples/slurm/README.md"):
    t = open("%s/%s" % (repo, doc)).read()
    conds = re.findall(r'if \[ "\$rc" = (\d+) \]', t)
    assert conds, "%s: no drain rule" % doc
    if set(conds) != {"3"}:
        print("FAIL: %s drains on %s" % (doc, conds)); bad += 1
    print("%s: drains on %s" % (doc, conds))
sys.exit(1 if bad else 0)
PY

# ---- 2. --hostfile passes the agents' codes through ----
rsh=$repo/tests/helpers/code_rsh.sh
# hostfile_code WANT HOST...: a static job over HOSTs through code_rsh.sh exits WANT.
hostfile_code() {
  local want=$1 rc=0; shift
  local h i=0; : >"$tmp/hosts"
  for h in "$@"; do echo "$h-$i slots=1" >>"$tmp/hosts"; i=$((i + 1)); done
  "$trun" --hostfile "$tmp/hosts" --rsh "$rsh" --master-port 29481 "$repo/tests/helpers/touch.py" \
    >"$tmp/hf.out" 2>"$tmp/hf.err" || rc=$?
  echo "hosts $*: exit $rc"
  if [ "$rc" != "$want" ]; then cat "$tmp/hf.err" >&2; fail "hosts $*: trun --hostfile exited $rc, want $want"; fi
  if [ "$want" -gt 1 ]; then grep -q "exit $want, " "$tmp/hf.err" || { cat "$tmp/hf.err" >&2; fail "no line names exit $want's host"; }; fi
}
hostfile_code 0 c0 c0
for code in 2 3 4 5 6 1; do hostfile_code "$code" "c$code"; done
hostfile_code 1 c255
hostfile_code 1 s9
hostfile_code 1 c7
hostfile_code 5 c1 c3 c5 c4
hostfile_code 3 c4 c1 c3 c6
hostfile_code 6 c4 c6 c1
hostfile_code 4 c1 c4 c255
hostfile_code 2 c5 c2 c3
echo "PASS: one exit code table in --help and the documents; --hostfile passes the agents' codes through"
