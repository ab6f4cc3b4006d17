"""Compares the worker environments torchrun and trun gave, per local rank (41-agent-env-vs-torchrun).

argv: LABEL TORCHRUN_DIR TRUN_DIR NPROC [ALLOWED...]
Each dir holds env.<local_rank>.json written by tests/helpers/dumpenv.py. ALLOWED entries name known, expected
differences: "rename:OLD=NEW" (torchrun sets OLD, trun sets NEW, same value), "newer:KEY=VALUE" (this torchrun
does not set KEY, trun sets KEY=VALUE as the newest torchrun does), "value:KEY=TORCHRUN>TRUN" (a deliberate
value difference), "trun:KEY=VALUE" (trun's own NCCL / EFA decision, source "trun" in `trun --explain`, on a
GPU or EFA node), "own:KEY=REGEX" (torchrun does not set KEY, trun sets it to a per-run value matching REGEX
in full, the same on every local rank: NCCL_RAS_ADDR, the job's own RAS port). The flight-recorder variables trun adds on a GPU node are accepted by
FLIGHT_RECORDER below. Prints every difference found;
exit 1 when any difference is not excluded below or ALLOWED, 0 otherwise.
"""
import json
import os
import re
import sys

# Keys left out of the comparison, each with the reason.
EXCLUDED = {
    "_": "bash sets it to the path of the command it ran (python3 vs trun): a property of the launching shell",
    "PWD": "shell bookkeeping of the launching shell, not set by a launcher",
    "OLDPWD": "shell bookkeeping of the launching shell, not set by a launcher",
    "SHLVL": "shell nesting depth of the launching shell, not set by a launcher",
    "LC_CTYPE": "Python's C-locale coercion (PEP 538) puts it into a python launcher's own environment "
                "when the locale is C/POSIX; trun is not python",
    "MASTER_PORT": "a free port chosen per run",
    "TORCHELASTIC_RUN_ID": "--standalone picks a random UUID per run",
    "TORCHELASTIC_ERROR_FILE": "the run dir has a random name: only its attempt_N/<local_rank>/error.json tail "
                               "is compared",
}

# Keys trun adds for torch's flight recorder on a node with a GPU, unless the launching environment set them
# (agent/agent_fr.c, docs/observability.md "The flight recorder"): accepted only where torchrun sets nothing,
# with the value matching. The one list of them; agent_fr.c's trun__agent_fr_vars names the same six.
FR_PREFIX = r".*/(flight_recorder|trun_fr_[^/]+)/rank_"
FLIGHT_RECORDER = {
    "TORCH_NCCL_TRACE_BUFFER_SIZE": ("2000", "entries each NCCL process keeps (the default of recent torch, 0 before)"),
    "TORCH_FR_BUFFER_SIZE": ("2000", "the same, by the name torch 2.11 and later read without a warning"),
    "TORCH_NCCL_DUMP_ON_TIMEOUT": ("1", "dump when torch's watchdog fires; the dump pipe is read every second"),
    "TORCH_FR_DUMP_TEMP_FILE": (FR_PREFIX, "where each rank dumps: the node's flight-recorder directory"),
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": (FR_PREFIX, "the same for torch 2.2 to 2.6"),
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": (FR_PREFIX, "the dump pipe trun writes at a hang (the job goes on)"),
}

label, tdir, rdir, nproc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
renames, newer, values, decided, own = {}, {}, {}, {}, {}
for a in sys.argv[5:]:
    kind, _, spec = a.partition(":")
    old, _, new = spec.partition("=")
    if kind not in ("rename", "newer", "value", "trun", "own") or not old or not new:
        sys.exit("bad ALLOWED entry %r" % a)
    if kind == "rename":
        renames[old] = new
    elif kind == "newer":
        newer[old] = new
    elif kind == "trun":
        decided[old] = new
    elif kind == "own":
        own[old] = re.compile(new)
    else:
        tv_, _, rv_ = new.partition(">")
        values[old] = (tv_, rv_)

MUST = ["LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
        "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
        "TORCHELASTIC_ERROR_FILE"]
tail_re = re.compile(r"/(attempt_\d+/\d+/error\.json)$")
bad = []
seen = []
own_values = {}
for lr in range(nproc):
    def load(d):
        with open(os.path.join(d, "env.%d.json" % lr)) as f:
            return json.load(f)
    t, r = load(tdir), load(rdir)
    for k in MUST:
        if k not in t:
            bad.append("local rank %d: torchrun's worker lacks %s: is the dump from a torchrun worker?" % (lr, k))
    for old, new in renames.items():
        if t.get(old) is not None and r.get(new) == t.get(old) and new not in t and old not in r:
            seen.append("local rank %d: expected rename: torchrun %s=%s, trun %s=%s" % (lr, old, t[old], new, r[new]))
            t[new] = t.pop(old)
    for k in sorted(set(t) | set(r)):
        if k in EXCLUDED and k != "TORCHELASTIC_ERROR_FILE":
            continue
        tv, rv = t.get(k), r.get(k)
        if k == "TORCHELASTIC_ERROR_FILE" and tv is not None and rv is not None:
            tm, rm = tail_re.search(tv), tail_re.search(rv)
            tv, rv = tm and tm.group(1), rm and rm.group(1)
            if tv is None or tv != rv or tv != "attempt_0/%d/error.json" % lr:
                bad.append("local rank %d: TORCHELASTIC_ERROR_FILE tails differ: torchrun %r, trun %r"
                           % (lr, t.get(k), r.get(k)))
            continue
        if tv == rv:
            continue
        if tv is None and newer.get(k) == rv:
            seen.append("local rank %d: expected: only trun (like newer torchrun) sets %s=%s" % (lr, k, rv))
            continue
        if tv is None and k in FLIGHT_RECORDER and re.fullmatch(FLIGHT_RECORDER[k][0], rv):
            seen.append("local rank %d: expected: trun's flight recorder %s=%s (%s)" % (lr, k, rv, FLIGHT_RECORDER[k][1]))
            continue
        if tv is None and k in own and rv is not None and own[k].fullmatch(rv):
            if own_values.setdefault(k, rv) != rv:
                bad.append("local rank %d: %s=%s differs from another local rank's %s" % (lr, k, rv, own_values[k]))
            else:
                seen.append("local rank %d: expected: trun's own per-run %s=%s" % (lr, k, rv))
            continue
        if tv is None and decided.get(k) == rv:
            seen.append("local rank %d: expected: trun's own decision (--explain) %s=%s" % (lr, k, rv))
            continue
        if k in values and values[k] == (tv, rv):
            seen.append("local rank %d: expected value difference: %s torchrun %r, trun %r" % (lr, k, tv, rv))
            continue
        if tv is None:
            bad.append("local rank %d: only trun sets %s=%s" % (lr, k, rv))
        elif rv is None:
            bad.append("local rank %d: only torchrun sets %s=%s" % (lr, k, tv))
        else:
            bad.append("local rank %d: %s differs: torchrun %r, trun %r" % (lr, k, tv, rv))
    if int(r.get("LOCAL_RANK", -1)) != lr or int(t.get("LOCAL_RANK", -1)) != lr:
        bad.append("local rank %d: the dumps disagree on LOCAL_RANK" % lr)

print("[%s] excluded keys: %s" % (label, ", ".join(sorted(EXCLUDED))))
for s in seen:
    print("[%s] %s" % (label, s))
for b in bad:
    print("[%s] DIFFERENCE %s" % (label, b))
if bad:
    sys.exit(1)
print("[%s] worker environments match (%d local ranks)" % (label, nproc))
