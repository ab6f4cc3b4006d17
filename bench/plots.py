"""PNG plots from bench result files, written next to each file (run by `make bench` after bench.py).

Usage: plots.py [RESULTS.json ...]  (default: the newest bench/results/*-cpu.json and every GPU result file)

For X.json it writes, when X holds the data:
  X-rdzv.png   rendezvous time vs agents, log-log, one line per mode (CPU files)
  X-store.png  TCPStore ops/s and p99 vs clients, one line per server (CPU files; GPU files' `steps.store`)
Needs matplotlib (Debian's python3-matplotlib; `make bench-deps` installs it).
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "bench", "results")
RDZV_MODES = ("trun-fast", "trun-c10d", "torchrun-1.13", "torchrun-2.6")
# trun solid, torch dashed, one color per contender in every plot.
STYLE = {"trun": ("C0", "-", "o"), "trun-fast": ("C0", "-", "o"), "trun-c10d": ("C2", "-", "s"),
         "torch-1.13": ("C1", "--", "^"), "torchrun-1.13": ("C1", "--", "^"),
         "torch-2.6": ("C3", "--", "v"), "torchrun-2.6": ("C3", "--", "v"),
         "torch-2.11-libuv": ("C4", "--", "D"), "trun-4t": ("C2", "-", "s"), "trun-8t": ("C5", "-", "P")}


def default_files():
    cpu = sorted(glob.glob(os.path.join(RESULTS, "*-cpu.json")))
    gpu = sorted(f for f in glob.glob(os.path.join(RESULTS, "*.json")) if not f.endswith("-cpu.json"))
    return cpu[-1:] + gpu


def line(ax, name, xs, ys):
    color, ls, marker = STYLE.get(name, (None, "-", "o"))
    ax.plot(xs, ys, color=color, linestyle=ls, marker=marker, label=name)


def rdzv_plot(res, title, path):
    rows = res.get("rdzv", [])
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for mode in RDZV_MODES:
        pts = sorted((r["agents"], r["seconds"]) for r in rows if r["mode"] == mode)
        if pts:
            line(ax, mode, [p[0] for p in pts], [p[1] for p in pts])
    fails = [f.split(",")[0] + f" at {f.split(',')[1].split()[0]}" for f in res.get("rdzv_failed", [])
             if "," in f and f.split(",")[1].split()[:1]]
    ax.set_xscale("log")
    ax.set_yscale("log")
    sizes = sorted({r["agents"] for r in rows})
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{n:,}" for n in sizes])
    ax.minorticks_off()
    ax.set_xlabel("agents")
    ax.set_ylabel("last join to every rank assigned (s)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    if fails:
        fig.subplots_adjust(bottom=0.18)
        fig.text(0.5, 0.01, "did not finish: " + "; ".join(fails), ha="center", va="bottom", fontsize=8,
                 color="0.3")
    fig.savefig(path)
    plt.close(fig)
    return True


def store_plot(rows, title, path):
    if not rows:
        return False
    servers = sorted(dict.fromkeys(r["server"] for r in rows), key=lambda s: s != "trun")  # trun first
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110)
    for s in servers:
        pts = sorted((r["clients"], r["ops_per_sec"], r["p99_us"]) for r in rows if r["server"] == s)
        line(a, s, [p[0] for p in pts], [p[1] / 1000 for p in pts])
        line(b, s, [p[0] for p in pts], [p[2] / 1000 for p in pts])
    a.set_ylabel("ops/s (thousands, higher is better)")
    a.set_ylim(bottom=0)
    b.set_ylabel("p99 latency (ms, log, lower is better)")
    b.set_yscale("log")
    clients = sorted({r["clients"] for r in rows})
    for ax in (a, b):
        ax.set_xscale("log")
        ax.set_xticks(clients)
        ax.set_xticklabels([f"{c:,}" for c in clients])
        ax.minorticks_off()
        ax.set_xlabel("clients")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plots_for(path):
    """The PNG files written for one result file."""
    res = json.load(open(path))
    stem = path[:-len(".json")]
    name = os.path.basename(stem)
    out = []
    if path.endswith("-cpu.json"):
        if rdzv_plot(res, f"Rendezvous time vs agents ({name})", stem + "-rdzv.png"):
            out.append(stem + "-rdzv.png")
        rows = res.get("store", [])
    else:
        rows = res.get("steps", {}).get("store", [])
    if store_plot(rows, f"TCPStore server under trun-store bench ({name})", stem + "-store.png"):
        out.append(stem + "-store.png")
    return out


def main():
    files = sys.argv[1:] or default_files()
    if not files:
        sys.exit("plots.py: no result files in bench/results; run make bench")
    for f in files:
        try:
            for p in plots_for(f):
                print(f"plot: {os.path.relpath(p, REPO)}")
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"plots.py: {f}: {e!r}; is it a bench result file?")


if __name__ == "__main__":
    main()
