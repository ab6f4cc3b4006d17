"""trun, a torchrun peer in C, as a Python package.

pip puts the programs trun, trun-store, trun-topo and trun-preflight into the environment's bin/ (the
wheel carries them as scripts, as the ninja and cmake wheels carry theirs); `python -m trun ARGS` runs
trun with ARGS, like `python -m torch.distributed.run`. program(NAME) gives a program's path.
"""
import os
import shutil
from importlib import metadata

PROGRAMS = ("trun", "trun-store", "trun-topo", "trun-preflight")

try:
    __version__ = metadata.version("trun")
except metadata.PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "unknown"


def program(name="trun"):
    """The path of the installed program NAME: where pip put it (the distribution's RECORD, which works for
    venvs, --user and --prefix installs alike), else NAME on PATH. Raises FileNotFoundError."""
    if name not in PROGRAMS:
        raise ValueError(f"trun: no program {name!r}; one of {', '.join(PROGRAMS)}")
    try:
        files = metadata.distribution("trun").files or []
    except metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == name and f.parent.name in ("bin", "scripts", "Scripts"):
            path = os.path.normpath(str(f.locate()))
            if os.access(path, os.X_OK):
                return path
    path = shutil.which(name)
    if path:
        return path
    raise FileNotFoundError(f"trun: the {name} program is not installed with this package "
                            "(reinstall it: pip install --force-reinstall trun)")
