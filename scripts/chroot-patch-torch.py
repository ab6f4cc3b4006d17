"""Makes Debian's torch 2.6 (built without libuv) honour USE_LIBUV=0 everywhere it builds a TCPStore.

Debian's python3-torch 2.6 has no libuv, and TCPStore(...) defaults to use_libuv=True, which raises
"use_libuv was requested but PyTorch was build without libuv support". torch reads USE_LIBUV only in some
call sites; this adds `use_libuv=<USE_LIBUV env>` to every TCPStore(...) call in torch.distributed that
does not pass it. Run inside the test chroot; idempotent.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/lib/python3/dist-packages/torch/distributed")
KWARG = 'use_libuv=__import__("os").environ.get("USE_LIBUV", "1") == "1"'


def close_paren(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced call")


def patch(path: pathlib.Path) -> int:
    text = path.read_text()
    out, pos, n = [], 0, 0
    for m in re.finditer(r"\bTCPStore\(", text):
        if m.start() < pos:
            continue
        open_at = m.end() - 1
        end = close_paren(text, open_at)
        args = text[open_at + 1:end]
        if "use_libuv" in args or args.strip() == "":
            continue
        sep = "" if args.rstrip().endswith(",") else ", "
        out.append(text[pos:end] + sep + KWARG)
        pos = end
        n += 1
    if n:
        out.append(text[pos:])
        path.write_text("".join(out))
    return n


total = 0
for f in sorted(ROOT.rglob("*.py")):
    if "/testing/" in str(f):
        continue
    k = patch(f)
    if k:
        print(f"patched {k} TCPStore call(s) in {f.relative_to(ROOT)}")
    total += k
print(f"chroot-patch-torch: {total} call(s) patched")
