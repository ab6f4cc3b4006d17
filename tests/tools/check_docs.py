"""Checks that the shipped docs stand alone.

1. Links: every [text](target) and ![alt](target) in README.md, docs/**/*.md, config/README.md and the Markdown
   files under k8s/ and examples/ names a file or directory of the tree (not outside it), and a #anchor names a
   heading of that Markdown file (GitHub's ids: lower case, punctuation dropped, spaces to hyphens, -1, -2 ...
   for repeats). Links inside code blocks and code spans are not links. External links (http:, https:, mailto:)
   are not checked.
2. Citations: every shipped doc (README.md, docs/** with the man pages, examples/**, k8s/**, config/README.md,
   packaging/**) and every text given with --text (what the programs print: --help, --explain) cites nothing
   that does not ship: no path outside the tree (`../shared`, `shared/spec`, `shared/seeds`, `/work/`), no
   "seeds" / "seed notes" (the project's notes), no section signs (`§3`, roff's `\(sc`), no design-note tags
   (`(R1)`, `(O1, O7)`), no "the spec" as a document, no `*.md` file name that is not in the tree.
3. docs/testing.md's table of integration tests has one row per tests/integration/NN-name.sh, and its index of
   unit tests one row per tests/unit/test_*.c, no more, no less.

Usage: check_docs.py [--root DIR] [--text LABEL=FILE ...]   (default root: the repository this file is in)
Exit 0 when all holds; 1 with one line per problem, `file:line: what is wrong: the fix`.
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
    """The Markdown files whose links are checked, relative to root, in a stable order."""
    pats = ["README.md", "docs/**/*.md", "config/README.md", "k8s/**/*.md", "examples/**/*.md"]
    out = []
    for p in pats:
        out += sorted(os.path.relpath(f, root) for f in glob.glob(os.path.join(root, p), recursive=True))
    return out


SHIPPED = ["README.md", "config/README.md", "docs", "examples", "k8s", "packaging"]
SKIP_DIRS = {"__pycache__", ".git", "node_modules"}


def shipped(root):
    """Every text file of the shipped docs, relative to root, in a stable order (binary files left out)."""
    out = []
    for top in SHIPPED:
        base = os.path.join(root, top)
        if os.path.isfile(base):
            out.append(top)
        for d, dirs, files in os.walk(base):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
            out += [os.path.relpath(os.path.join(d, f), root) for f in sorted(files)]
    return [f for f in out if is_text(os.path.join(root, f))]


def is_text(path):
    try:
        with open(path, "rb") as f:
            data = f.read(65536)
        data.decode("utf-8")
        return b"\0" not in data
    except (OSError, UnicodeDecodeError):
        return False


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
    top = os.path.realpath(root)
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
                if os.path.isabs(path) or not (os.path.realpath(dest) + os.sep).startswith(top + os.sep):
                    errors.append(f"{page}:{n}: {target}: points outside the tree; the shipped docs must stand "
                                  "alone: say the fact here or link a file of the tree")
                elif not os.path.exists(dest):
                    errors.append(f"{page}:{n}: {target}: no such file or directory "
                                  f"({os.path.relpath(dest, root)})")
                elif frag and dest.endswith(".md") and frag not in anchors(dest):
                    errors.append(f"{page}:{n}: {target}: no heading with id '{frag}' in "
                                  f"{os.path.relpath(dest, root)}")
    return errors


# What the shipped docs must not cite: (pattern, what it is). Matched in every line, code spans and code
# blocks included (a path in backquotes is still a path a reader cannot open).
CITES = [
    (re.compile(r"\.\./+shared\b|(?<![\w.-])shared/(?:spec|seeds|gpu-runs|hooks)\b"),
     "a path outside the tree (the project's shared/ folder does not ship)"),
    (re.compile(r"(?<![\w.-])/work/"), "a path outside the tree (/work/ is the developers' machine)"),
    (re.compile(r"(?<![\w.-])(?<!random )(?<!hash )seeds(?![\w-])|\bseed notes?\b|\b[Tt]he seed(?:'s|s')"
                r"|\b(?:in|from|by) the seed\b(?! of)|\b[Tt]he seed (?:measured|says|shows|ran)\b"),
     "the project's seed notes (they do not ship)"),
    (re.compile(r"§|\\\(sc|\\\[sc\]"), "a section sign: a reference to a section of a document that does not ship"),
    (re.compile(r"\((?:[A-Z][0-9]{1,2}[a-z]?)(?:,\s*[A-Z][0-9]{1,2}[a-z]?)*\)"),  # not NVLink's (NV12)
     "a design-note tag (a source list that does not ship)"),
    (re.compile(r"\b(?:[Tt]he|[Ii]ts|[Oo]ur|trun's) spec(?:'s)?\b(?![.:/_-])"),
     "'the spec' as a document (it does not ship)"),
]
MD_NAME = re.compile(r"(?<![\w/.~$<{-])((?:[\w.-]+/)*[\w-]+\.md)\b(?![\w/-])")
FIX = "say the fact itself in the doc (the shipped docs must stand alone)"


def md_names(root):
    """The Markdown files of the tree: their paths relative to root, and their base names."""
    paths = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and x != "build"]
        paths |= {os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".md")}
    return paths, {os.path.basename(p) for p in paths}


def cites(label, text, here, root, names):
    """label:line: problems of one text (here: its folder, for relative .md names; None for program output)."""
    errors = []
    paths, bases = names
    for n, line in enumerate(text.split("\n"), 1):
        for pat, what in CITES:
            m = pat.search(line)
            if m:
                errors.append(f"{label}:{n}: '{m.group(0)}': {what}; {FIX}")
        for m in MD_NAME.finditer(line):
            name = m.group(1)
            if line[:m.start()].endswith("](") or line[:m.start()].endswith("](./"):
                continue  # a Markdown link's target: check() judges it
            rel = os.path.normpath(os.path.join(here, name)) if here is not None else name
            if rel not in paths and os.path.normpath(name) not in paths and name not in bases:
                errors.append(f"{label}:{n}: '{name}': no such Markdown file in the tree; {FIX}, or name a "
                              "file of the tree")
    return errors


def standalone(root, texts):
    errors = []
    names = md_names(root)
    for f in shipped(root):
        text = open(os.path.join(root, f), encoding="utf-8").read()
        errors += cites(f, text, os.path.dirname(f), root, names)
    for label, path in texts:
        errors += cites(label, open(path, encoding="utf-8", errors="replace").read(), None, root, names)
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
    return rows_vs_files(root, r"^\| `(\d\d+-[\w.-]+)` \|", "tests/integration/[0-9][0-9]*-*.sh", 3,
                         "the integration tests table", "tests/integration/%s.sh")


def unit_rows(root):
    """docs/testing.md's index of unit tests against tests/unit/test_*.c."""
    return rows_vs_files(root, r"^\| `(test_\w+\.c)` \|", "tests/unit/test_*.c", 0, "the index of unit tests",
                         "tests/unit/%s")


def main():
    ap = argparse.ArgumentParser(description="Checks that README.md, docs/, examples/, k8s/ and the programs' "
                                 "output stand alone: links resolve in the tree, nothing cites what does not ship.")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    ap.add_argument("--text", action="append", default=[], metavar="LABEL=FILE",
                    help="also check FILE (a program's output), reported as LABEL")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    texts = []
    for t in args.text:
        label, eq, path = t.partition("=")
        if not eq or not label or not os.path.isfile(path):
            ap.error(f"--text {t}: want LABEL=FILE with an existing file")
        texts.append((label, path))
    errors = check(root) + standalone(root, texts) + test_rows(root) + unit_rows(root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        sys.exit(f"check_docs.py: {len(errors)} problem(s); fix the target or the link (paths are relative to "
                 "the file that holds the link), the citation, or docs/testing.md's table")
    print(f"check_docs.py: every relative link of {len(pages(root))} Markdown files resolves; "
          f"{len(shipped(root))} shipped files and {len(texts)} program outputs cite nothing outside the tree; "
          "docs/testing.md lists every integration test and every unit test")


if __name__ == "__main__":
    main()
