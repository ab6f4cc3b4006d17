#!/usr/bin/env python3
"""The tree's shape in numbers, for a review of its structure (issue notes, docs/architecture.md): each module's
files and lines, the largest structs (members at their top level, and how many are function pointers) and the
longest functions (lines from the opening to the closing brace).

Usage: scripts/house-stats.py [--rev REV] [--top N] [--under DIR]
  --rev REV  a commit of this repository to measure instead of the work tree (read with `git show`, nothing
             checked out)
  --top N    how many structs and functions to list (default 10)
  --under DIR  only the files under DIR (e.g. agent) for the struct and function lists

C sources are read as text (comments and literals blanked): a function is a definition in the project's style
(clang-format: the signature from column 0, ending in ') {'); a struct is `struct NAME {` (or `typedef struct NAME {`) up to its closing brace, its members the
';'-ended declarations at depth 1. Tests, fuzz targets, benches and generated files are left out.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = ("tests/", "fuzz/", "bench/", "build/", "examples/", "packaging/", "scripts/")


def files(rev):
    if rev:
        out = subprocess.run(["git", "-C", ROOT, "ls-tree", "-r", "--name-only", rev], check=True,
                             capture_output=True, text=True).stdout.split()
    else:
        out = subprocess.run(["git", "-C", ROOT, "ls-files"], check=True, capture_output=True,
                             text=True).stdout.split()
    return sorted(f for f in out if f.endswith((".c", ".h")) and not f.startswith(SKIP))


def read(rev, path):
    if rev:
        return subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{path}"], check=True, capture_output=True,
                              text=True, errors="replace").stdout
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def strip(text):
    """Comments and string/char literals blanked, newlines kept (so line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c if j - i >= 2 else text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module(path):
    parts = path.split("/")
    if parts[0] == "agent" and len(parts) > 2:
        return "agent/" + parts[1]
    return parts[0] if len(parts) > 1 else "(top)"


def functions(path, text):
    """Definitions in this project's style: the signature starts in column 0 (its continuation lines are
    indented) and its last line ends with ') {'; the body runs to the matching brace."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if not line or line[0] in " \t#}{" or re.match(r"(typedef|struct|enum|union)\b[^(]*\{", line):
            i += 1
            continue
        k = i
        while k < len(lines) and not lines[k].rstrip().endswith((";", "{", "}")) and k - i < 12:
            k += 1
        sig = " ".join(x.strip() for x in lines[i:k + 1])
        m = re.match(r"[^=;{]*?\b([A-Za-z_]\w*)\s*\(", sig)
        if k >= len(lines) or not m or not re.search(r"\)\s*\{$", sig.rstrip()):
            i = k + 1
            continue
        depth, e = 0, k
        while e < len(lines):
            depth += lines[e].count("{") - lines[e].count("}")
            if depth == 0:
                break
            e += 1
        out.append((e - i + 1, m.group(1), f"{path}:{i + 1}"))
        i = e + 1
    return out


def structs(path, text):
    out = []
    for m in re.finditer(r"^(?:typedef\s+)?struct\s+(\w+)\s*\{", text, re.M):
        depth, i, members, fptrs, stmt = 1, m.end(), 0, 0, ""
        while i < len(text) and depth > 0:
            c = text[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            elif c == ";" and depth == 1:
                members += 1
                if re.search(r"\(\s*\*", stmt):
                    fptrs += 1
                stmt = ""
            if depth >= 1 and c not in "{};":
                stmt += c
            elif c == ";" or c == "}":
                stmt = "" if depth == 1 else stmt
            i += 1
        line = text.count("\n", 0, m.start()) + 1
        out.append((members, fptrs, m.group(1), f"{path}:{line}"))
    return out


def main():
    ap = argparse.ArgumentParser(description="the tree's shape in numbers")
    ap.add_argument("--rev", default="")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--under", default="")
    a = ap.parse_args()
    mods, funcs, sts = {}, [], []
    for f in files(a.rev):
        raw = read(a.rev, f)
        text = strip(raw)
        m = mods.setdefault(module(f), [0, 0, 0])
        m[0] += 1
        m[1] += raw.count("\n")
        mine = not a.under or f.startswith(a.under.rstrip("/") + "/")
        if f.endswith(".c"):
            fs = functions(f, text)
            funcs += fs if mine else []
            m[2] += len(fs)
        sts += structs(f, text) if mine else []
    total = sum(v[1] for v in mods.values())
    print(f"# {a.rev or 'work tree'}: {sum(v[0] for v in mods.values())} files, {total} lines, "
          f"{len(funcs)} functions")
    print("\n| module | files | lines | share | functions |\n|---|---|---|---|---|")
    for k, v in sorted(mods.items(), key=lambda kv: -kv[1][1]):
        print(f"| {k} | {v[0]} | {v[1]} | {100 * v[1] / total:.0f} % | {v[2]} |")
    lens = sorted(x[0] for x in funcs)
    if lens:
        print(f"\nfunctions: median {lens[len(lens) // 2]} lines, 90th percentile {lens[int(len(lens) * 0.9)]}, "
              f"over 60 lines: {sum(1 for x in lens if x > 60)}")
    print("\n| largest structs | members | of them function pointers | where |\n|---|---|---|---|")
    for n, fp, name, where in sorted(sts, key=lambda s: -s[0])[:a.top]:
        print(f"| {name} | {n} | {fp} | {where} |")
    print("\n| longest functions | lines | where |\n|---|---|---|")
    for n, name, where in sorted(funcs, key=lambda s: -s[0])[:a.top]:
        print(f"| {name} | {n} | {where} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
