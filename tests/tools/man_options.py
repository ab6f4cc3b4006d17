"""Every option a program's --help lists must be in its man page (docs/man/*.1).

  python3 man_options.py MANPAGE HELPFILE...

HELPFILE: the output of one `--help` (trun-store has one per command). Options are the words that start
with '-' or '--' followed by a letter, not glued to a preceding word or '-' ('nvidia-smi' is not one);
both spellings of trun's options count (--nproc-per-node and --nproc_per_node). In the roff source '\\-'
reads as '-' and font escapes (\\fB, \\fI, \\fR, \\fP) are dropped before the search.
Prints what was checked. Exit: 0 all found; 1 options missing from the page (each named); 2 usage.
"""
import re
import sys

OPTION = re.compile(r"(?<![\w\-/=.])(--?[A-Za-z][\w\-]*)")


def options(text):
    found = set()
    for m in OPTION.finditer(text):
        opt = m.group(1).rstrip("-")
        if opt.startswith("--") or len(opt) == 2:  # -h, -m, -r, -t; not '-u' inside prose words
            found.add(opt)
    return found


def roff_text(src):
    src = re.sub(r"^\.\\\".*$", "", src, flags=re.M)  # comments
    src = src.replace("\\-", "-").replace("\\e", "\\")
    return re.sub(r"\\f[BIRP]|\\\(..", "", src)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        page = roff_text(f.read())
    listed = set()
    for path in argv[2:]:
        with open(path, encoding="utf-8") as f:
            listed |= options(f.read())
    if not listed:
        print(f"man_options: no options found in {' '.join(argv[2:])}", file=sys.stderr)
        return 2
    in_page = options(page)
    missing = sorted(listed - in_page)
    for opt in missing:
        print(f"man_options: {argv[1]}: {opt} is in --help but not in the man page", file=sys.stderr)
    print(f"man_options: {argv[1]}: {len(listed) - len(missing)} of {len(listed)} --help options documented")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
