#!/usr/bin/env python3
"""Checks that the C code keeps its modules' shape (docs/architecture.md, `make layers`, part of check).

A module is a folder with one public header named after it (store/store.h, agent/rdzv/rdzv.h, ...) whose
opening comment has a line "May use: a, b, c." naming the modules it may include; a subfolder that is not a
module of its own (agent/rdzv/c10d/, one backend) belongs to the module above it. The programs (launcher/,
tools/) may use every module. base/ is the bottom: any module may name it, and its own line must say
"May use: nothing" (it uses nothing of trun's). For each #include "..." in the code of a module or program:
  - a header of the same module (its folder and the subfolders it owns) is always fine;
  - a header of another module must be that module's public header, and that module must be one the
    includer may use;
  - a quoted include that names no file of the tree is an error.
The "May use" lines must form no circle. Tests, fuzz targets and benches are not checked: they drive
modules from outside and may include their private headers.
With --doc FILE (docs/architecture.md; `make layers` and test 05 pass it) the document must agree with the
code, so that it cannot drift: its module table ("| module | folder | its job | may use |") has one row per
module and program, each module's folder and "may use" cell name what its header's line says (the programs'
say "every module"), and each row uses only rows below it; and the fenced block after the line
"<!-- layers: check-layers.py --graph -->" is the layer drawing --graph prints (each module one layer above
the highest it may use).
With --calls no module's files call each other in a circle: a file that calls a function another file of
its module defines (not static) depends on that file, and those dependencies form no circle (agent/agent.c
calling agent/agent_stdin.c which calls back into agent/agent.c is a breach); and a subfolder of a module
(a backend of agent/rdzv: c10d/, static/, trun/) is called by name only from inside itself: the rest of
the module reaches it through its ops table. Calls are read from the text (comments, strings and
preprocessor lines left out); a function-like macro is not seen, a call through a pointer is not a call.
Usage: scripts/check-layers.py [--root DIR] [--graph] [--doc FILE] [--calls]   (--graph prints each module and
what it uses, then the layers).
Exit codes: 0 the shape holds, 1 a rule is broken (every breach on stderr), 2 bad usage."""
import os
import re
import sys

# Folder of each module, by the name the "May use" lines give it.
MODULES = {
    "base": "base",
    "store": "store",
    "config": "config",
    "discover": "agent/discover",
    "proc": "agent/proc",
    "rdzv": "agent/rdzv",
    "nccl": "agent/nccl",
    "observe": "agent/observe",
    "hang": "agent/hang",
    "agent": "agent",
}
PROGRAMS = {"launcher": "launcher", "tools": "tools"}
# The module every other may use and that uses none (log, buffers, clock, environment vectors).
BOTTOM = "base"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def face(name):
    folder = MODULES[name]
    return folder + "/" + os.path.basename(folder) + ".h"


def owner(path):
    """The module or program whose folder holds path, directly or in a subfolder (the deepest one), or None."""
    best, d = None, os.path.dirname(path)
    for name, folder in list(MODULES.items()) + list(PROGRAMS.items()):
        if (d == folder or d.startswith(folder + "/")) and (best is None or len(folder) > len(best[1])):
            best = (name, folder)
    return best[0] if best else None


def may_use(root, errors):
    uses = {}
    for name in MODULES:
        path = os.path.join(root, face(name))
        try:
            text = open(path, encoding="utf-8").read()
        except OSError:
            errors.append("%s: missing: every module has one public header named after its folder" % face(name))
            continue
        m = re.search(r"May use:\s*(.*?)(?:\.\s|\.$|\n \*\s*\n|\*/)", text, re.S)
        if not m:
            errors.append("%s: no 'May use:' line in its opening comment" % face(name))
            continue
        said = m.group(1).replace("*", " ")
        if said.strip().startswith("nothing"):
            uses[name] = set()
            continue
        found = set()
        for word in re.findall(r"[a-z]+", re.sub(r"\([^)]*\)", "", said)):
            if word in MODULES:
                found.add(word)
        uses[name] = found - {name}
    return uses


def circles(uses):
    """Every module that lies on a circle of the 'May use' graph, as paths."""
    out, state = [], {}

    def visit(n, path):
        state[n] = 1
        for m in sorted(uses.get(n, ())):
            if state.get(m) == 1:
                out.append(" -> ".join(path[path.index(m):] + [m]))
            elif m not in state:
                visit(m, path + [m])
        state[n] = 2

    for n in sorted(uses):
        if n not in state:
            visit(n, [n])
    return out


def code_files(root):
    """Every .c and .h of the modules and programs, their subfolders included (each file once)."""
    seen = set()
    for folder in list(MODULES.values()) + list(PROGRAMS.values()):
        for d, subs, files in os.walk(os.path.join(root, folder)):
            subs.sort()
            rel = os.path.relpath(d, root)
            for f in sorted(files):
                if f.endswith((".c", ".h")) and rel + "/" + f not in seen:
                    seen.add(rel + "/" + f)
                    yield rel + "/" + f


# Comments, strings, character constants and preprocessor lines (continued ones too), blanked for --calls.
C_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*',
                     re.S | re.M)
# A function definition as clang-format writes it: its type and name from column 0, then "(params) {".
C_DEF = re.compile(r"^([A-Za-z_][\w \t*]*?)\b([A-Za-z_]\w*)\s*\(([^;{}()]*(?:\([^()]*\)[^;{}()]*)*)\)\s*\{", re.M)
C_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
C_WORDS = {"if", "for", "while", "switch", "return", "sizeof", "_Alignof", "defined", "do"}


def definitions(text):
    """(name, static?, body) of each function defined in text (already blanked of C_NOISE)."""
    out = []
    for m in C_DEF.finditer(text):
        if m.group(2) in C_WORDS:
            continue
        depth, j = 0, m.end() - 1
        for j in range(m.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
        out.append((m.group(2), "static" in m.group(1).split(), text[m.end():j]))
    return out


def call_circles(root):
    """For each module, the circles of its files' calls to one another: one line per circle, with a call
    that makes each step of it."""
    files = {}
    for rel in code_files(root):
        if rel.endswith(".c") and owner(rel) in MODULES:
            files.setdefault(owner(rel), []).append(rel)
    out = []
    for mod, names in sorted(files.items()):
        defined, own, funcs = {}, {}, {}
        for rel in names:
            text = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
            funcs[rel] = definitions(C_NOISE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text))
            own[rel] = {n for n, _, _ in funcs[rel]}
            for n, static, _ in funcs[rel]:
                if not static:
                    defined.setdefault(n, rel)
        deps = {rel: {} for rel in names}
        for rel in names:
            for fn, _, body in funcs[rel]:
                for c in C_CALL.findall(body):
                    if c not in own[rel] and defined.get(c, rel) != rel:
                        deps[rel].setdefault(defined[c], "%s calls %s" % (fn, c))
        for comp in strongly_connected(deps):
            steps = ["%s -> %s (%s)" % (a, b, deps[a][b]) for a in comp for b in comp if b in deps[a]]
            out.append("module %s: %d files call each other in a circle: %s" % (mod, len(comp), "; ".join(steps)))
        # A subfolder of a module (a backend of rdzv) is reached from outside it only through its ops table.
        top = MODULES[mod]
        for rel in names:
            for dep, why in sorted(deps[rel].items()):
                sub = os.path.dirname(dep)
                if sub != top and not (os.path.dirname(rel) + "/").startswith(sub + "/"):
                    out.append("module %s: %s calls into %s/ by name (%s): reach it through its ops table" % (
                        mod, rel, sub, why))
    return out


def strongly_connected(deps):
    """The groups of more than one node that reach each other (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(n):
        index[n] = low[n] = len(index)
        stack.append(n)
        on.add(n)
        for m in sorted(deps[n]):
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in on:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            comp = []
            while not comp or comp[-1] != n:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                out.append(sorted(comp))

    for n in sorted(deps):
        if n not in index:
            visit(n)
    return out


def layers(uses):
    """The layer drawing: the programs on top, then each module one layer above the highest it may use."""
    level = {}

    def lv(n, seen=()):
        if n not in level:
            level[n] = 0 if n in seen else 1 + max([lv(m, seen + (n,)) for m in uses.get(n, ())] or [-1])
        return level[n]

    for n in MODULES:
        lv(n)
    top = max(level.values() or [0]) + 1
    rows = ["layer %d  %s  (programs: may use every module)" % (top, "  ".join(sorted(PROGRAMS)))]
    for k in range(top - 1, -1, -1):
        rows.append("layer %d  %s" % (k, "  ".join(sorted(n for n in level if level[n] == k))))
    return rows


DOC_MARK = "<!-- layers: check-layers.py --graph -->"


def check_doc(path, uses, errors):
    """The module table and the layer drawing of the architecture document against the code."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        errors.append("%s: cannot read: %s" % (path, e.strerror))
        return
    doc = os.path.basename(path)
    lines = text.split("\n")
    head = next((i for i, l in enumerate(lines) if re.match(r"\|\s*module\s*\|\s*folder\s*\|", l)), None)
    if head is None:
        errors.append("%s: no module table (| module | folder | its job | may use |)" % doc)
        return
    order, i = [], head + 2
    while i < len(lines) and lines[i].startswith("|"):
        cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
        i += 1
        if len(cells) < 4:
            errors.append("%s:%d: a row of the module table has %d cells, want 4" % (doc, i, len(cells)))
            continue
        name, folder, said = cells[0], cells[1].strip("`").rstrip("/"), cells[-1]
        order.append(name)
        if name in PROGRAMS:
            if folder != PROGRAMS[name] or "every module" not in said:
                errors.append("%s:%d: program %s: want folder `%s/` and 'every module'" % (doc, i, name, PROGRAMS[name]))
            continue
        if name not in MODULES:
            errors.append("%s:%d: '%s' in the module table is no module of scripts/check-layers.py" % (doc, i, name))
            continue
        if folder != MODULES[name]:
            errors.append("%s:%d: module %s's folder is `%s/`, the table says `%s/`" % (doc, i, name, MODULES[name], folder))
        got = set() if said.startswith("nothing") else set(w.strip() for w in said.split(",") if w.strip())
        want = uses.get(name, set())
        if got != want:
            errors.append("%s:%d: module %s: the table says it may use %s, %s says: %s" % (
                doc, i, name, ", ".join(sorted(got)) or "nothing", face(name), ", ".join(sorted(want)) or "nothing"))
    for n in list(MODULES) + list(PROGRAMS):
        if n not in order:
            errors.append("%s: the module table has no row for %s" % (doc, n))
    for k, n in enumerate(order):
        above = [m for m in order[:k] if m in MODULES]
        for m in sorted(uses.get(n, ())):
            if m in above:
                errors.append("%s: the module table lists %s above %s, which uses it (a module uses only rows below it)" % (doc, m, n))
    if DOC_MARK not in lines:
        errors.append("%s: no line '%s' before the layer drawing" % (doc, DOC_MARK))
        return
    j = lines.index(DOC_MARK) + 1
    if j >= len(lines) or not lines[j].startswith("```"):
        errors.append("%s:%d: a fenced block must follow '%s'" % (doc, j + 1, DOC_MARK))
        return
    k = j + 1
    while k < len(lines) and not lines[k].startswith("```"):
        k += 1
    drawn = [l.rstrip() for l in lines[j + 1:k]]
    if drawn != layers(uses):
        errors.append("%s:%d: the layer drawing differs from the code's; it should read:\n%s" % (
            doc, j + 2, "\n".join(layers(uses))))


def main(argv):
    root, graph, doc, calls = ".", False, None, False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--root" and args:
            root = args.pop(0)
        elif a == "--graph":
            graph = True
        elif a == "--doc" and args:
            doc = args.pop(0)
        elif a == "--calls":
            calls = True
        else:
            print("usage: scripts/check-layers.py [--root DIR] [--graph] [--doc FILE] [--calls]", file=sys.stderr)
            return 2
    errors = []
    uses = may_use(root, errors)
    for c in circles(uses):
        errors.append("the 'May use' lines make a circle: %s" % c)
    if uses.get(BOTTOM):
        errors.append("%s: %s is the bottom module and may use nothing of trun's, but its 'May use' line names %s" % (
            face(BOTTOM), BOTTOM, ", ".join(sorted(uses[BOTTOM]))))
    faces = {face(n): n for n in MODULES}
    n_includes = 0
    for rel in code_files(root):
        me = owner(rel)
        text = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            n_includes += 1
            here = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            target = here if os.path.isfile(os.path.join(root, here)) else os.path.normpath(inc)
            if not os.path.isfile(os.path.join(root, target)):
                errors.append('%s:%d: #include "%s" names no file of the tree' % (rel, line, inc))
                continue
            other = owner(target)
            if os.path.dirname(target) == os.path.dirname(rel) or (other == me and target not in faces):
                continue
            if target not in faces:
                what = ("the private header %s of module %s (include %s)" % (target, other, face(other))
                        if other in MODULES else "%s, which is no module's public header" % target)
                errors.append('%s:%d: #include "%s": %s' % (rel, line, inc, what))
                continue
            other = faces[target]
            if me in PROGRAMS or other == me:
                continue
            if other not in uses.get(me, set()):
                errors.append('%s:%d: #include "%s": module %s may not use %s (%s says: May use: %s)' % (
                    rel, line, inc, me, other, face(me), ", ".join(sorted(uses.get(me, ()))) or "nothing"))
    if doc:
        check_doc(doc, uses, errors)
    if calls:
        errors += call_circles(root)
    if graph:
        for n in MODULES:
            print("%-9s %-16s may use: %s" % (n, MODULES[n] + "/", ", ".join(sorted(uses.get(n, ()))) or "-"))
        print("\n".join(layers(uses)))
    for e in errors:
        print("layers: " + e, file=sys.stderr)
    if errors:
        print("layers: %d breach(es) of the module rules (see scripts/check-layers.py)" % len(errors), file=sys.stderr)
        return 1
    print("layers: %d includes in %d modules and 2 programs keep the shape" % (n_includes, len(MODULES)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
