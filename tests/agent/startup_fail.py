# A training script that cannot start (tests/integration/49-agent-crash-loop.sh): it records the attempt
# (one line per start in <file>), waits <seconds>, then fails with an import error, as a typo'd module name
# does (pytorch#60910). Local rank 0 only records; every rank fails.
import os, sys, time

import torch  # noqa: F401  (torch 1.13: the failure comes after the real import)

count_file, wait = sys.argv[1], float(sys.argv[2])
if os.environ["LOCAL_RANK"] == "0":
    with open(count_file, "a") as f:
        f.write("attempt %s\n" % os.environ.get("TORCHELASTIC_RESTART_COUNT", "?"))
time.sleep(wait)
import nonexistent_module_for_trun_test  # noqa: F401,E402
