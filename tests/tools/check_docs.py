"""Checks the relative links of the guide and its reference: every [text](target) and ![alt](target) in README.md,
docs/*.md and the other READMEs (config/, k8s/, examples/, examples/*/) names a file or directory that exists,
and a #anchor names a heading of that Markdown file (GitHub's ids: lower case, punctuation dropped, spaces to
hyphens, -1, -2 ... for repeats). Links inside code blocks and code spans are not links. External links
(http:, https:, mailto:) are not checked. Also: docs/testing.md's table of integration tests has one row per
tests/integration/NN-name.sh, and its index of unit tests one row per tests/unit/test_*.c, no more, no less.

Usage: check_docs.py [--root DIR]   (default: the repository this file is in)
Exit 0 when every link resolves; 1 with one line per broken link, `file:line: target: what is wrong`.
Run by tests/integration/90-bench-readme.sh.
"""
import argparse
import glob
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def pages(root):
    """The Markdown files checked, relative to root, in a stable order."""
    pats = ["README.md", "docs/*.md", "config/README.md", "k8s/README.md", "examples/README.md",
            "examples/*/README.md"]
    out = []
    for p in pats:
        out += sorted(os.path.relpath(f, root) for f in glob.glob(os.path.join(root, p)))
    return out


def lines_outside_code(text):
    """(line number, line with code spans blanked) for every line outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced and not line.startswith("    "):
            yield n, re.sub(r"`[^`]*`", lambda m: "`" + " " * (len(m.group(0)) - 2) + "`", line)


def slug(heading):
    """GitHub's id for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    ids, seen = set(), {}
    fenced = False
    for line in open(path, encoding="utf-8").read().split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            ids.add(s if n == 0 else f"{s}-{n}")
    return ids


def check(root):
    errors = []
    for page in pages(root):
        here = os.path.dirname(os.path.join(root, page))
        text = open(os.path.join(root, page), encoding="utf-8").read()
        for n, line in lines_outside_code(text):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
                    continue
                path, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(here, path)) if path else os.path.join(root, page)
                if not os.path.exists(dest):
                    errors.append(f"{page}:{n}: {target}: no such file or directory "
                                  f"({os.path.relpath(dest, root)})")
                elif frag and dest.endswith(".md") and frag not in anchors(dest):
                    errors.append(f"{page}:{n}: {target}: no heading with id '{frag}' in "
                                  f"{os.path.relpath(dest, root)}")
    return errors


def rows_vs_files(root, row_re, pattern, strip, table, path):
    """One table of docs/testing.md against the files it indexes (both ways): row_re's group is the name a
    row gives, pattern the files (relative to root), strip what a file's base name loses to be that name."""
    doc = os.path.join(root, "docs", "testing.md")
    if not os.path.exists(doc):
        return []
    rows = set(re.findall(row_re, open(doc, encoding="utf-8").read(), re.M))
    names = [os.path.basename(f) for f in glob.glob(os.path.join(root, pattern))]
    have = {n[:len(n) - strip] for n in names}
    return ([f"docs/testing.md: {path % t} has no row in {table}; add one" for t in sorted(have - rows)] +
            [f"docs/testing.md: row `{t}` names no {path % t}; remove or rename it" for t in sorted(rows - have)])


def test_rows(root):
    """docs/testing.md's integration-test rows against tests/integration/*.sh."""
    return rows_vs_files(root, r"^\| `(\d\d-[\w.-]+)` \|", "tests/integration/[0-9][0-9]-*.sh", 3,
                         "the integration tests table", "tests/integration/%s.sh")


def unit_rows(root):
    """docs/testing.md's index of unit tests against tests/unit/test_*.c."""
    return rows_vs_files(root, r"^\| `(test_\w+\.c)` \|", "tests/unit/test_*.c", 0, "the index of unit tests",
                         "tests/unit/%s")


def main():
    ap = argparse.ArgumentParser(description="Checks the relative links of README.md, docs/ and the other READMEs.")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    root = os.path.abspath(ap.parse_args().root)
    errors = check(root) + test_rows(root) + unit_rows(root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        sys.exit(f"check_docs.py: {len(errors)} problem(s); fix the target or the link (paths are relative to "
                 "the file that holds the link), or docs/testing.md's table")
    print(f"check_docs.py: every relative link of {len(pages(root))} Markdown files resolves; docs/testing.md lists "
          "every integration test and every unit test")


if __name__ == "__main__":
    main()
