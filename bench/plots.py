"""PNG plots from bench result files, written next to each file (run by `make bench` after bench.py).

Usage: plots.py [RESULTS.json ...]  (default: the newest bench/results/*-cpu.json and every GPU result file)

For X.json it writes, when X holds the data:
  X-rdzv.png   rendezvous time vs agents, log-log, one line per mode (CPU files)
  X-store.png  TCPStore ops/s and p99 vs clients, one line per server (CPU files; GPU files' `steps.store`)
  X-busbw.png  all-reduce busbw vs size: trun-preflight, torch's all-reduce in a CUDA graph and eager, one pod vs
               two pods; and preflight vs torch per size against the 5 % band (GPU files whose
               `steps.preflight` compared with torch in a CUDA graph)
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


def ar_points(lines):
    """(bytes, busbw) from examples/allreduce_nccl.py's 'AR n=2 bytes=B time_us=T busbw=X GB/s' lines."""
    pts = []
    for ln in lines:
        f = dict(w.split("=", 1) for w in ln.split() if "=" in w)
        if "bytes" in f and "busbw" in f:
            pts.append((int(f["bytes"]), float(f["busbw"])))
    return sorted(pts)


def busbw_plot(pf, title, path):
    vs = pf.get("vs_torch") or []
    if not vs or pf.get("torch_mode") != "graph" or not (pf.get("preflight") or {}).get("results"):
        return False
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.4), dpi=110)
    pre = [(r["bytes"], r["busbw"]) for r in pf["preflight"]["results"]]
    a.plot([x for x, _ in pre], [y for _, y in pre], "C0-o", ms=3, label="trun-preflight (one pod)")
    a.plot([r["bytes"] for r in vs], [r["torch_busbw"] for r in vs], "C4--D", ms=3,
           label="torch 2.11 all-reduce, CUDA graph")
    eager = [(r["bytes"], r["torch_eager_busbw"]) for r in vs if r.get("torch_eager_busbw")]
    if eager:
        a.plot([x for x, _ in eager], [y for _, y in eager], "C1:", label="torch 2.11 all-reduce, eager loop")
    ex = pf.get("experiment") or {}
    for key, style, name in (("one_pod", "C2s", "one pod, trun --nccl-report (eager)"),
                             ("two_pods", "C3X", "two pods, NCCL over sockets (eager)")):
        pts = ar_points((ex.get(key) or {}).get("ar", []))
        if pts:
            a.plot([x for x, _ in pts], [y for _, y in pts], style, ms=8, label=name)
    a.set_yscale("log")
    a.set_xlabel("all-reduce size")
    a.set_ylabel("busbw (GB/s, log)")
    a.grid(True, which="major", alpha=0.3)
    a.legend(fontsize=8, loc="upper left")
    b.axhspan(-5, 5, color="0.9", label="within 5 %")
    b.plot([r["bytes"] for r in vs], [(r["ratio"] - 1) * 100 for r in vs], "C0-o", ms=3,
           label="preflight vs torch (CUDA graph), by time")
    b.axhline(0, color="0.5", lw=0.8)
    b.set_xlabel("all-reduce size")
    b.set_ylabel("preflight busbw above torch's (%)")
    b.grid(True, which="major", alpha=0.3)
    b.legend(fontsize=8, loc="upper right")
    ticks = [(8, "8 B"), (1 << 10, "1 KiB"), (32 << 10, "32 KiB"), (1 << 20, "1 MiB"), (32 << 20, "32 MiB"),
             (1 << 30, "1 GiB")]
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xticks([t for t, _ in ticks])
        ax.set_xticklabels([n for _, n in ticks])
        ax.minorticks_off()
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
    st = res.get("steps", {})
    if busbw_plot(st.get("preflight") or {}, f"NCCL all-reduce, {res.get('gpus')} x {res.get('gpu_name')} ({name})",
                  stem + "-busbw.png"):
        out.append(stem + "-busbw.png")
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
