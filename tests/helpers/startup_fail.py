# A training script that cannot start (tests/integration/49-agent-crash-loop.sh): every rank records the
# attempt ("attempt <TORCHELASTIC_RESTART_COUNT> rank <RANK>", one line per start in <file>; the test counts
# distinct attempts, so a rank torn down before it wrote does not matter), imports torch, waits <seconds>,
# then fails with an import error, as a typo'd module name does (pytorch#60910). STARTUP_FAIL_TORCH=0 skips
# the torch import (the cases that count rounds, not what a real start-up does: one import less per rank and round).
import os, sys, time

count_file, wait = sys.argv[1], float(sys.argv[2])
with open(count_file, "a") as f:
    f.write("attempt %s rank %s\n" % (os.environ.get("TORCHELASTIC_RESTART_COUNT", "?"), os.environ["RANK"]))
if os.environ.get("STARTUP_FAIL_TORCH") != "0":
    import torch  # noqa: F401,E402  (torch 1.13: the failure comes after the real import)

time.sleep(wait)
import nonexistent_module_for_trun_test  # noqa: F401,E402
