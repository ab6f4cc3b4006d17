#!/usr/bin/env bash
# The module rules (scripts/check-layers.py, `make layers`): the tree keeps them, and the checker is live:
# on a copy of the code it rejects an include against the direction (nccl -> agent; a backend of rdzv -> agent),
# a module's private header included from another module (a backend's too: its folder belongs to rdzv), a
# circle in the "May use" lines, an include of no file, and base (the bottom) using anything of trun's: an
# include of another module, or a "May use" line that names one. docs/architecture.md cannot drift: the
# checker (--doc) rejects a module table row whose "may use" cell or folder differs from the header's line, a
# module missing from the table, a row above one that it uses, and a layer drawing that is not the code's.
# With --calls it rejects two files of one module calling each other (a circle of calls), and does not take
# a call named in a comment or a string, or a call of a static function of the caller's own, for one. The
# agent's own files (agent/*.c) call one another in no circle, and its state (struct agent) holds no function
# pointer (issue 40); rdzv has no circle, and a file of rdzv calling one of its backends by name (not
# through its ops table) is rejected.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
py=${TRUN_HOST_PY:-/usr/bin/python3}
check() { "$py" "$repo/scripts/check-layers.py" "$@"; }

echo "== 1. this tree"
check --root "$repo" --graph --doc "$repo/docs/architecture.md" --calls ||
  fail "the tree breaks the module rules (a circle of calls in a module too), or docs/architecture.md disagrees with it (above)"

# expect_breach NAME MESSAGE: a copy of the code with one change ($tmp/t) must fail naming MESSAGE.
expect_breach() {
  local rc=0
  check --root "$tmp/t" --doc "$tmp/t/docs/architecture.md" >/dev/null 2>"$tmp/err" || rc=$?
  [ "$rc" -eq 1 ] || fail "$1: the checker exited $rc, want 1: $(cat "$tmp/err")"
  grep -qF "$2" "$tmp/err" || fail "$1: no '$2' in: $(cat "$tmp/err")"
  echo "ok: rejected $1"
}
fresh_copy() {
  rm -rf "$tmp/t"
  mkdir -p "$tmp/t"
  (cd "$repo" && cp -r --parents base store config agent launcher tools docs/architecture.md "$tmp/t/")
  check --root "$tmp/t" --doc "$tmp/t/docs/architecture.md" >/dev/null ||
    fail "an unchanged copy of the code does not pass"
}

echo "== 2. breaches"
fresh_copy
sed -i '0,/^#include "/s//#include "agent\/agent.h"\n#include "/' "$tmp/t/agent/nccl/doctor.c"
expect_breach "nccl including the agent (upwards)" 'agent/nccl/doctor.c:'
grep -qF 'module nccl may not use agent' "$tmp/err" || fail "the message does not name the rule: $(cat "$tmp/err")"

fresh_copy
sed -i '0,/^#include "/s//#include "agent\/rdzv\/c10d\/dynamic.h"\n#include "/' "$tmp/t/agent/agent.c"
expect_breach "a private header of rdzv in the agent" 'the private header agent/rdzv/c10d/dynamic.h of module rdzv'

# A backend's folder belongs to rdzv: it keeps rdzv's rules (no include upwards) ...
fresh_copy
sed -i '0,/^#include "/s//#include "agent\/agent.h"\n#include "/' "$tmp/t/agent/rdzv/c10d/dynamic.c"
expect_breach "a backend of rdzv including the agent (upwards)" 'module rdzv may not use agent'
# ... and its private headers stay private to rdzv.
fresh_copy
sed -i '0,/^#include "/s//#include "agent\/rdzv\/trun\/fast.h"\n#include "/' "$tmp/t/agent/nccl/doctor.c"
expect_breach "a backend's header in nccl" 'the private header agent/rdzv/trun/fast.h of module rdzv'

fresh_copy
sed -i 's/^ \* May use: base\./ * May use: base, nccl./' "$tmp/t/agent/discover/discover.h"
grep -q 'May use: base, nccl' "$tmp/t/agent/discover/discover.h" || fail "could not edit discover's May use line"
expect_breach "a circle in the May use lines" "the 'May use' lines make a circle"

fresh_copy
sed -i '0,/^#include "/s//#include "no_such_header.h"\n#include "/' "$tmp/t/launcher/main.c"
expect_breach "an include of no file" '#include "no_such_header.h" names no file of the tree'

# base is the bottom: its code may include nothing of trun's, even a module every other may use.
fresh_copy
sed -i '0,/^#include "/s//#include "store\/store.h"\n#include "/' "$tmp/t/base/log.c"
grep -q '^#include "store/store.h"' "$tmp/t/base/log.c" || fail "could not add the include to base/log.c"
expect_breach "base including the store" 'base/log.c:'
grep -qF 'module base may not use store' "$tmp/err" || fail "the message does not name the rule: $(cat "$tmp/err")"

# ... and its "May use" line may name nothing: the checker says so in those words (a circle through config
# is reported too, since config names base).
fresh_copy
sed -i 's/^ \* May use: nothing of trun.s (libc only)\./ * May use: config./' "$tmp/t/base/base.h"
grep -q 'May use: config\.' "$tmp/t/base/base.h" || fail "could not edit base's May use line"
expect_breach "base's May use line naming a module" 'base is the bottom module and may use nothing'
echo "== 3. the document against the code"
doc=$tmp/t/docs/architecture.md
fresh_copy
sed -i 's/^\(| proc | `agent\/proc\/` | .*\)| base, discover |$/\1| base |/' "$doc"
grep -q '^| proc | .*| base |$' "$doc" || fail "could not edit proc's row"
expect_breach "a table row that forgets a module the header names" 'module proc: the table says it may use base, agent/proc/proc.h says: base, discover'

fresh_copy
sed -i 's/^ \* May use: base\./ * May use: base, store./' "$tmp/t/agent/discover/discover.h"
expect_breach "a header that names a module the table does not" 'module discover: the table says it may use base, agent/discover/discover.h says: base, store'

fresh_copy
sed -i '/^| hang | `agent\/hang\/`/d' "$doc"
expect_breach "a module without a row" 'the module table has no row for hang'

fresh_copy
row=$(grep '^| base | `base/`' "$doc")
sed -i '/^| base | `base\/`/d' "$doc"
sed -i "/^| store | \`store\/\`/i $(printf '%s' "$row" | sed 's/[\/&]/\\&/g')" "$doc"
grep -q '^| base |' "$doc" || fail "could not move base's row"
expect_breach "a row above one that uses it" 'the module table lists base above store'

fresh_copy
sed -i 's/^layer 2  proc  rdzv$/layer 2  rdzv/; s/^layer 1  config  discover  hang  store$/layer 1  config  discover  hang  proc  store/' "$doc"
grep -q '^layer 2  rdzv$' "$doc" || fail "could not edit the layer drawing"
expect_breach "a layer drawing that is not the code's" 'the layer drawing differs from the code'
echo "== 4. circles of calls (--calls)"
agent_calls=$(check --root "$repo" --calls 2>&1 >/dev/null | grep -F 'module agent:' || true)
[ -z "$agent_calls" ] || fail "the agent's files call each other in a circle: $agent_calls"
echo "ok: no circle of calls among agent/*.c"
# struct agent, from its opening line to the closing '};' at the start of a line: no '(*name)' member.
pointers=$(sed -n '/^struct agent {/,/^};/p' "$repo/agent/agent_int.h" | grep -n '(\*' || true)
[ -n "$(sed -n '/^struct agent {/,/^};/p' "$repo/agent/agent_int.h")" ] || fail "no struct agent in agent/agent_int.h"
[ -z "$pointers" ] || fail "struct agent holds function pointers (back-calls): $pointers"
echo "ok: no function pointer in struct agent"
# expect_calls NAME MESSAGE: as expect_breach, with --calls.
expect_calls() {
  local rc=0
  check --root "$tmp/t" --calls >/dev/null 2>"$tmp/err" || rc=$?
  [ "$rc" -eq 1 ] || fail "$1: the checker exited $rc, want 1: $(cat "$tmp/err")"
  grep -qF "$2" "$tmp/err" || fail "$1: no '$2' in: $(cat "$tmp/err")"
  echo "ok: rejected $1"
}
# calls_of DIR: the --calls breaches naming DIR/ (the module under test), or nothing.
calls_of() { check --root "$tmp/t" --calls 2>&1 >/dev/null | grep -F "$1" || true; }
fresh_copy
[ -z "$(calls_of agent/discover/)" ] || fail "discover has a circle of calls before the test adds one: $(calls_of agent/discover/)"
d=$tmp/t/agent/discover
printf '\nint trun__layers_test_a(void) {\n  return trun_mask_count(0, 0);\n}\n' >>"$d/instance_types.c"
[ -z "$(calls_of agent/discover/)" ] || fail "a call one way is called a circle: $(calls_of agent/discover/)"
# A call named in a comment or a string, and a static function of the same name, are no calls back.
printf '\n/* trun__layers_test_a() */\nstatic const char *s = "trun__layers_test_a(";\nstatic int trun__layers_test_a(void) {\n  return 0;\n}\nint trun__layers_test_b(void) {\n  return trun__layers_test_a();\n}\n' >>"$d/cpulist.c"
[ -z "$(calls_of agent/discover/)" ] || fail "a comment, a string or a static function made a circle: $(calls_of agent/discover/)"
printf '\nint trun__layers_test_c(void) {\n  return trun_instance_lookup("x") != 0;\n}\n' >>"$d/cpulist.c"
expect_calls "two files of discover calling each other" 'module discover: 2 files call each other in a circle'
grep -qF 'agent/discover/cpulist.c -> agent/discover/instance_types.c (trun__layers_test_c calls trun_instance_lookup)' "$tmp/err" ||
  fail "the breach does not name the call: $(cat "$tmp/err")"
# rdzv: no circle among its files, and its backends (subfolders) reached only through their ops table.
fresh_copy
[ -z "$(calls_of agent/rdzv/)" ] || fail "rdzv's files call each other in a circle or a backend by name: $(calls_of agent/rdzv/)"
printf '\nint trun__layers_test_d(void) {\n  return trun_fast_join(0);\n}\n' >>"$tmp/t/agent/rdzv/rdzv_store.c"
expect_calls "a backend of rdzv called by name" 'module rdzv: agent/rdzv/rdzv_store.c calls into agent/rdzv/trun/ by name (trun__layers_test_d calls trun_fast_join)'
echo PASS
