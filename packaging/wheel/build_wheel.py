"""Builds trun's wheel from the release tree with the standard library only (no index, no build backend):
a wheel is a zip with a fixed layout (PEP 427 / the binary distribution format), which pip installs and
uninstalls by its RECORD.

  python3 build_wheel.py STAGE VERSION OUTDIR

STAGE: the release tree (bin/, share/man/man1/, LICENSE, README.md, from scripts/release.sh). Writes
OUTDIR/trun-VERSION-py3-none-manylinux_2_31_x86_64.whl:
  trun/__init__.py, trun/__main__.py         the package (`python -m trun`, trun.program())
  trun-VERSION.data/scripts/<program>          the four programs -> the environment's bin/
  trun-VERSION.data/data/share/man/man1/*.gz   the man pages    -> the environment's share/man/man1/
  trun-VERSION.dist-info/{METADATA,WHEEL,LICENSE,third-party/*.copyright,top_level.txt,RECORD}
The tag: any Python 3 (the package is pure Python), the programs need glibc >= 2.31 on x86-64. Entries
are sorted and dated SOURCE_DATE_EPOCH (else 1980-01-01) so that the same tree gives the same bytes.
Exit: 0 written; 1 the tree lacks a file (named); 2 usage.
"""
import base64
import hashlib
import os
import sys
import time
import zipfile

PROGRAMS = ("trun", "trun-store", "trun-topo", "trun-preflight")
TAG = "py3-none-manylinux_2_31_x86_64"
HERE = os.path.dirname(os.path.abspath(__file__))


def metadata(version, readme):
    return (f"""Metadata-Version: 2.1
Name: trun
Version: {version}
Summary: A torchrun peer in C: starts and supervises distributed PyTorch workers with torchrun's command line
License: BSD-3-Clause
Platform: Linux x86-64 (glibc >= 2.31)
Classifier: Development Status :: 4 - Beta
Classifier: Environment :: Console
Classifier: Intended Audience :: Science/Research
Classifier: License :: OSI Approved :: BSD License
Classifier: Operating System :: POSIX :: Linux
Classifier: Programming Language :: C
Classifier: Programming Language :: Python :: 3
Classifier: Topic :: Scientific/Engineering :: Artificial Intelligence
Requires-Python: >=3.8
Description-Content-Type: text/markdown

""" + readme).encode()


def wheel_file():
    return (f"Wheel-Version: 1.0\nGenerator: trun packaging/wheel/build_wheel.py\nRoot-Is-Purelib: false\n"
            f"Tag: {TAG}\n").encode()


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    stage, version, outdir = argv[1:]
    files = []  # (archive name, bytes, executable)

    def add_file(arc, path, executable=False):
        if not os.path.isfile(path):
            print(f"build_wheel: {path} is missing (run make release)", file=sys.stderr)
            raise SystemExit(1)
        with open(path, "rb") as f:
            files.append((arc, f.read(), executable))

    data = f"trun-{version}.data"
    info = f"trun-{version}.dist-info"
    for mod in ("__init__.py", "__main__.py"):
        add_file(f"trun/{mod}", os.path.join(HERE, "trun", mod))
    for p in PROGRAMS:
        add_file(f"{data}/scripts/{p}", os.path.join(stage, "bin", p), executable=True)
        add_file(f"{data}/data/share/man/man1/{p}.1.gz", os.path.join(stage, "share", "man", "man1", f"{p}.1.gz"))
    with open(os.path.join(stage, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    files.append((f"{info}/METADATA", metadata(version, readme), False))
    files.append((f"{info}/WHEEL", wheel_file(), False))
    files.append((f"{info}/top_level.txt", b"trun\n", False))
    add_file(f"{info}/LICENSE", os.path.join(stage, "LICENSE"))
    for lib in ("libuv", "jansson", "libyaml"):  # linked into the programs: their notices travel with them
        add_file(f"{info}/third-party/{lib}.copyright",
                 os.path.join(stage, "share", "doc", "trun", "third-party", f"{lib}.copyright"))

    record = []
    for arc, body, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(body)}")
    record.append(f"{info}/RECORD,,")
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode(), False))

    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    date = time.gmtime(max(epoch, 315532800))[:6]
    os.makedirs(outdir, exist_ok=True)
    out = os.path.join(outdir, f"trun-{version}-{TAG}.whl")
    tmp = out + ".tmp"
    # dist-info last (RECORD last of all), as wheel tools write it.
    order = sorted(files, key=lambda f: (f[0].startswith(info), f[0] == f"{info}/RECORD", f[0]))
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for arc, body, executable in order:
            zi = zipfile.ZipInfo(arc, date_time=date)
            zi.external_attr = (0o100755 if executable else 0o100644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, body)
    os.replace(tmp, out)
    print(f"build_wheel: {out} ({os.path.getsize(out) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
