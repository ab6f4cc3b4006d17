"""Compares the start shapes warmdump.py wrote for a cold and a warm run (tests/integration/38-warm-start.sh).
Usage: warmdiff.py LABEL COLD_DIR WARM_DIR NPROC COLD_LOGDIR WARM_LOGDIR
What only the run decides (its ports: MASTER_PORT and the RAS port NCCL_RAS_ADDR, run id, log and output
directories) is normalised; anything else that
differs is printed as a DIFFERENCE line and the exit status is 1."""
import json
import sys

label, cold_dir, warm_dir, nproc, cold_log, warm_log = sys.argv[1:7]
RUN_VARS = ("MASTER_PORT", "TORCHELASTIC_RUN_ID", "NCCL_RAS_ADDR")


def load(d, lr, logdir):
    with open("%s/shape.%d.json" % (d, lr)) as f:
        text = f.read().replace(logdir, "<LOGDIR>").replace(d, "<OUT>")
    s = json.loads(text)
    for k in RUN_VARS:
        if k not in s["environ"]:
            print("DIFFERENCE %s: %s is missing in %s" % (label, k, d))
            sys.exit(1)
        s["environ"][k] = "<run>"
    s["c_environ"] = [e if e.split("=", 1)[0] not in RUN_VARS else e.split("=", 1)[0] + "=<run>" for e in s["c_environ"]]
    # A known difference (docs/warm-start.md): multiprocessing aliases __mp_main__ to whatever __main__ is when
    # it is first imported; under --run-path a cold worker imports it inside runpy.run_path (its temporary
    # __main__, with __file__), a warm one had it imported by the pool (the interpreter's __main__).
    if "__mp_main__" in s.get("modules", {}):
        s["modules"]["__mp_main__"] = "<__main__ when multiprocessing was imported>"
    return s


bad = 0
for lr in range(int(nproc)):
    c, w = load(cold_dir, lr, cold_log), load(warm_dir, lr, warm_log)
    for k in sorted(set(c) | set(w)):
        if c.get(k) != w.get(k):
            bad = 1
            if isinstance(c.get(k), dict) and isinstance(w.get(k), dict):
                for kk in sorted(set(c[k]) | set(w[k])):
                    if c[k].get(kk) != w[k].get(kk):
                        print("DIFFERENCE %s rank %d %s[%s]: cold %r, warm %r" % (label, lr, k, kk, c[k].get(kk), w[k].get(kk)))
            else:
                print("DIFFERENCE %s rank %d %s: cold %r, warm %r" % (label, lr, k, c.get(k), w.get(k)))
print("%s: %d rank(s) compared, %s" % (label, int(nproc), "DIFFERENT" if bad else "the same"))
sys.exit(bad)
