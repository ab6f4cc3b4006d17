"""python -m trun ARGS: runs the trun program of this installation with ARGS (exit status and signals are
trun's own: the interpreter is replaced, not kept as a parent). The workers run with the interpreter that
ran this module, as torchrun's run with the Python that started it: PYTHON_EXEC is set to sys.executable
unless it is set already."""
import os
import sys

from . import program


def main():
    try:
        exe = program("trun")
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 1
    if not os.environ.get("PYTHON_EXEC") and sys.executable:
        os.environ["PYTHON_EXEC"] = sys.executable
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
