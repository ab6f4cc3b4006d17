"""Writes the results section of docs/results.md from the newest bench/results/*-cpu.json and every GPU result file.

Usage: readme.py [--readme docs/results.md] [--check] [RESULTS-cpu.json]  — replaces the text between
<!-- results:cpu:begin --> and <!-- results:cpu:end --> in that file: first every target of the issues with its
measured ratio and whether it is met, then the tables, with the plots bench/plots.py wrote next to each result
file (linked relative to the file written).
"""
import argparse
import glob
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- results:cpu:begin -->", "<!-- results:cpu:end -->"


def newest():
    files = sorted(glob.glob(os.path.join(REPO, "bench", "results", "*-cpu.json")))
    if not files:
        sys.exit("readme.py: no bench/results/*-cpu.json; run make bench")
    return files[-1]


def ratio(a, b):
    return f"{a / b:.1f}x" if a and b else "n/a"


def plot(png, what, src, readme_dir):
    """A plot bench/plots.py wrote next to a result file, with the command that made it; nothing if absent."""
    if not os.path.exists(png):
        return []
    return [f"![{what}]({os.path.relpath(png, readme_dir)})", "",
            f"<sub>`bench/plots.py {os.path.relpath(src, REPO)}` → `{os.path.relpath(png, REPO)}`</sub>", ""]


def verdict(ok):
    return "met" if ok else "**not met**"


def verdicts(xs, ok):
    """One verdict for several contenders: met, or which ones miss it. xs: (contender, value)."""
    miss = [o for o, x in xs if not ok(x)]
    if not miss:
        return "met"
    hit = [o for o, x in xs if ok(x)]
    return "**not met** vs " + ", ".join(miss) + (f"; met vs {', '.join(hit)}" if hit else "")


def label(path):
    """A result file's short name in the targets table: its name without directory and .json."""
    return os.path.basename(path)[:-len(".json")]


def size(b):
    """A message size as nccl-tests' sizes are read: 8 B, 512 KiB, 4 MiB, 1 GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def spans(vs, keep):
    """The sizes of vs (ascending) for which keep(row) holds, as runs of neighbours: '8 B, 1 KiB..4 MiB'."""
    out, run = [], []
    for r in vs + [None]:
        if r is not None and keep(r):
            run.append(r["bytes"])
            continue
        if run:
            out.append(size(run[0]) if len(run) == 1 else f"{size(run[0])}..{size(run[-1])}")
        run = []
    return ", ".join(out)


def within(r):
    return abs(r["ratio"] - 1) <= 0.05


def preflight_graph_row(vs, f, what):
    """Issue 6's preflight target against torch's all-reduce timed as nccl-tests does (--iters of them in one
    CUDA graph), so that every size counts; what: a note on the layout."""
    worst = max(vs, key=lambda r: abs(r["ratio"] - 1))
    off = [r for r in vs if not within(r)]
    text = (f"{len(vs)} sizes {size(vs[0]['bytes'])}..{size(vs[-1]['bytes'])} vs torch's all-reduce in a CUDA graph: "
            f"{len(vs) - len(off)} within 5 %, worst {(worst['ratio'] - 1) * 100:+.1f} % at {size(worst['bytes'])} ({f})")
    state = verdict(not off)
    if off and len(off) < len(vs):  # some sizes meet it: say which do not
        state = f"**not met** at {spans(vs, lambda r: not within(r))}; met at the other {len(vs) - len(off)}"
    return (f"Preflight busbw within 5 % of torch 2.11's all-reduce at the same sizes (issue 6{what})", text, state)


def ddp_row(dd, f, what):
    """Issue 7's DDP target: step time within 2 % of torchrun's, the same loss curve. Where a launcher's own runs
    spread more than 2 %, the ratio cannot show 2 %, and the row says so."""
    t, o = dd["median_step_ms"].get("trun"), dd["median_step_ms"].get("torchrun-2.11")
    if not t or not o:
        return (f"DDP step time within 2 % of torchrun 2.11's, same loss curve (issue 7{what})", f"no step times ({f})",
                "**not measured**")
    spread = [r["median_ms"] for r in dd["runs"].get("trun", [])]
    note = f"; trun's runs {min(spread):.2f}..{max(spread):.2f} ms" if spread else ""
    pairs = dd.get("pair_ratios") or []
    if pairs:
        note += f"; {len(pairs)} pairs {min(pairs):.3f}x..{max(pairs):.3f}x"
    return (f"DDP step time within 2 % of torchrun 2.11's, same loss curve (issue 7{what})",
            f"trun {t:.2f} ms vs torchrun 2.11 {o:.2f} ms = {t / o:.3f}x{note}; max loss difference "
            f"{dd['max_loss_diff']} ({f})",
            ("**not shown**: " + ("trun not slower" if t <= o else f"trun {t / o:.3f}x") +
             ", but its own runs spread more than 2 %")
            if spread and max(spread) > min(spread) * 1.02 else
            verdict(abs(t - o) <= o * 0.02 and dd["max_loss_diff"] == 0))


def targets(res, path, gpus):
    """(target, measured, met) rows: every target the issues set, from the result files."""
    rows = []
    cpu = label(path)
    st = {(r["server"], r["clients"]): r for r in res.get("store", [])}
    store = [(cpu, o, st.get(("trun", 1024)), st.get((o, 1024))) for o in ("torch-1.13", "torch-2.6")]
    for g in gpus:
        gs = {(r["server"], r["clients"]): r for r in json.load(open(g))["steps"].get("store", [])}
        # The trun variant with the most ops/s at 1024 clients (one loop, or --threads N where measured).
        best = max((r for (k, c), r in gs.items() if k.startswith("trun") and c == 1024),
                   key=lambda r: r["ops_per_sec"], default=None)
        store.append((label(g), "torch-2.11-libuv", best, gs.get(("torch-2.11-libuv", 1024))))
    store = [x for x in store if x[2] and x[3]]
    if store:
        def who(t):
            return "trun-store" if t["server"] == "trun" else f"trun-store --threads {t['server'][5:-1]}"
        ops = [(f, o, t["ops_per_sec"] / r["ops_per_sec"], who(t)) for f, o, t, r in store]
        p99 = [(f, o, t["p99_us"] / r["p99_us"], who(t)) for f, o, t, r in store]
        rows.append(("Store ops/s ≥ 2x torch's server at 1024 clients (issue 2)",
                     "; ".join(f"{w} {x:.2f}x vs {o} ({f})" for f, o, x, w in ops),
                     verdicts([(f"{o} ({f})", x) for f, o, x, _ in ops], lambda x: x >= 2)))
        rows.append(("Store p99 ≤ ½ torch's server's at 1024 clients (issue 2)",
                     "; ".join(f"{w} {x:.2f}x vs {o} ({f})" for f, o, x, w in p99),
                     verdicts([(f"{o} ({f})", x) for f, o, x, _ in p99], lambda x: x <= 0.5)))
    cn = {r["server"]: r for r in res.get("conns", [])}
    if "trun" in cn:
        t = cn["trun"]
        mb = t["rss_held_kb"] * 1024 / 1e6
        other = "; torch 1.13: " + f"{cn['torch-1.13']['rss_held_kb'] / 1024:.1f} MiB" if "torch-1.13" in cn else ""
        ok = t["connections"] >= 10000 and t["released"] == t["connections"] and mb < 200
        rows.append(("10,000 connections with a pending WAIT held in < 200 MB RSS (issue 2)",
                     f"{t['connections']} connections: {t['rss_held_kb'] / 1024:.1f} MiB ({mb:.1f} MB){other} ({cpu})",
                     verdict(ok) if t["connections"] >= 10000 else "not measured at 10,000"))
    launch = [(cpu, res.get("launch", []), ("torchrun-1.13", "torchrun-2.6"))]
    launch += [(label(g), json.load(open(g))["steps"].get("launch", []), ("torchrun-2.11",))
               for g in gpus]
    for f, la, others in launch:
        by = {(r["launcher"], r.get("nproc", 2)): r for r in la}
        for key, goal, what in (("wall_ms", 100, "faster launch to exit"),
                                ("peak_rss_mib", 50, "less launcher memory")):
            xs = [(o, n, by[(o, n)][key] / by[("trun", n)][key]) for o in others for n in (2, 8)
                  if (o, n) in by and ("trun", n) in by]
            if xs:
                rows.append((f"≥ {goal}x {what} than torchrun (issue 3)",
                             "; ".join(f"{x:.0f}x vs {o}, {n} workers" for o, n, x in xs) + f" ({f})",
                             verdict(all(x >= goal for _, _, x in xs))))
    rs = {r["launcher"]: r for r in res.get("restart", [])}
    xs = [(o, rs[o]["crash_to_restart_ms"] / rs["trun"]["crash_to_restart_ms"])
          for o in ("torchrun-1.13", "torchrun-2.6") if o in rs and "trun" in rs]
    if xs:
        rows.append(("Restart (worker crash to replacement) ≥ 10x faster than torchrun (issue 3)",
                     "; ".join(f"{x:.1f}x vs {o}" for o, x in xs) + f" ({cpu})", verdict(all(x >= 10 for _, x in xs))))
    rz = {(r["mode"], r["agents"]): r for r in res.get("rdzv", [])}
    fast = rz.get(("trun-fast", 10000))
    if fast:
        rows.append(("Fast rendezvous of 10,000 agents < 2 s on this 2-CPU box (issue 4)",
                     f"{fast['seconds']:.2f} s ({cpu})", verdict(fast["seconds"] < 2)))
    c10d = rz.get(("trun-c10d", 256))
    if c10d:
        parts, ok = [], True
        for o in ("torchrun-1.13", "torchrun-2.6"):
            r = rz.get((o, 256))
            if r:
                parts.append(f"{o} {r['seconds']:.2f} s ({r['seconds'] / c10d['seconds']:.1f}x slower)")
                ok = ok and c10d["seconds"] <= r["seconds"]
            elif any(f.startswith(f"{o}, 256 agents") for f in res.get("rdzv_failed", [])):
                parts.append(f"{o} did not finish")
        rows.append(("trun's c10d rendezvous no slower than torchrun's at 256 agents (issue 4)",
                     f"trun-c10d {c10d['seconds']:.2f} s; " + "; ".join(parts) + f" ({cpu})", verdict(ok)))
    rc = {(r["launcher"], r["kind"]): r for r in res.get("recovery", [])}
    for kind, goal in (("crash", 3), ("silent", 8)):
        mine = [(b, rc[(b, kind)]) for b in ("trun-c10d", "trun-trun") if (b, kind) in rc]
        if mine:
            o = rc.get(("torchrun-1.13", kind))
            other = ""
            if o:
                other = ("; torchrun-1.13 " + (f"{o['seconds']:.1f} s" if o["seconds"] is not None else
                                               f"none in {o['cap_seconds']:.0f} s"))
            rows.append((f"A node lost by {kind}: survivors train in the smaller world within {goal} s, "
                         "default settings, both backends (issue 22)",
                         "; ".join(f"{b} " + (f"{r['seconds']:.2f} s" if r["seconds"] is not None else
                                              f"none in {r['cap_seconds']:.0f} s") for b, r in mine) +
                         other + f" ({cpu})",
                         verdict(all(r["seconds"] is not None and r["seconds"] <= goal for _, r in mine))))
    sp = {(r["launcher"], r["kind"]): r for r in res.get("spare", [])}
    mine = [(b, sp[(b, "crash")]) for b in ("trun-c10d", "trun-trun") if (b, "crash") in sp]
    if mine:
        o = sp.get(("torchrun-1.13", "crash"))
        other = ""
        if o:
            other = ("; torchrun-1.13 " + (f"{o['seconds']:.1f} s" if o["seconds"] is not None else
                                           f"none in {o['cap_seconds']:.0f} s"))
        rows.append(("A spare takes over a crashed node within 3 s, both backends (issue 30)",
                     "; ".join(f"{b} " + (f"{r['seconds']:.2f} s" if r["seconds"] is not None else
                                          f"none in {r['cap_seconds']:.0f} s") for b, r in mine) +
                     other + f" ({cpu})",
                     verdict(all(r["seconds"] is not None and r["seconds"] <= 3 for _, r in mine))))
    for g in gpus:
        st = json.load(open(g))["steps"]
        f = label(g)
        pf = st.get("preflight", {})
        vs = pf.get("vs_torch") or []
        if vs and pf.get("torch_mode") == "graph":
            rows.append(preflight_graph_row(vs, f, ""))
        elif vs:
            # The target names every size; below the bandwidth-bound sizes torch's own timing (one Python call
            # per all-reduce) measures its call overhead, so both halves are shown as they are.
            close = [r for r in vs if abs(r["ratio"] - 1) <= 0.05]
            big = [r for r in vs if r["bytes"] >= (close[0]["bytes"] if close else 1 << 62)]
            worst = max((abs(r["ratio"] - 1) for r in big), default=None)
            small = [r for r in vs if r not in big]
            text = (f"{len(big)} sizes from {big[0]['bytes'] >> 20} MiB up: within {worst * 100:.1f} %" if big else
                    "no size within 5 %")
            if small:
                text += (f"; {len(small)} smaller sizes: preflight {min(r['ratio'] for r in small):.1f}x.."
                         f"{max(r['ratio'] for r in small):.1f}x torch's (torch times one Python call per "
                         f"all-reduce); nccl-tests not run")
            ok_big = bool(big) and worst <= 0.05
            rows.append(("Preflight busbw within 5 % of torch 2.11's all-reduce at the same sizes (issue 6)",
                         f"{text} ({f})",
                         ("met from %d MiB up; **not shown** below" % (big[0]['bytes'] >> 20)) if ok_big and small
                         else verdict(ok_big)))
        if st.get("health"):
            h = st["health"]
            rows.append(("Node health gate on a real GPU box well under a second per node (issue 20)",
                         f"{h['elapsed_ms_median']:.1f} ms, {len(h['checks'])} checks, status "
                         f"{h['runs'][0]['status']} ({f})", verdict(h["elapsed_ms_median"] < 1000)))
        if st.get("ddp"):
            rows.append(ddp_row(st["ddp"], f, ""))
        og = st.get("onegpu", {})
        proxy = ", 1-GPU proxy: two pods on the one GPU, NCCL over sockets"
        if og.get("vs_torch") and og.get("torch_mode") == "graph":
            rows.append(preflight_graph_row(og["vs_torch"], f, proxy))
        if og.get("ddp"):
            rows.append(ddp_row(og["ddp"], f, proxy))
    return rows


def render_targets(res, path, gpus):
    rows = targets(res, path, gpus)
    if not rows:
        return []
    files = [path] + gpus
    out = ["**Targets** set in the issues and what was measured side by side, each ratio as its target states it, "
           "computed from " +
           ", ".join(f"`{os.path.relpath(f, REPO)}`" for f in files) + ":", "",
           "| target | measured (file) | |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return out + [""]


def render(res, path, readme_dir):
    out = [f"Measured by `{res.get('command', 'make bench')}` on {res['date']} ({res['machine']['cpus']} CPUs, no GPU); "
           f"file `{os.path.relpath(path, REPO)}`. Contenders ran interleaved; each cell is a median.", ""]
    if res.get("measured"):
        out[0] = out[0][:-1] + ("; parts measured on: " +
                                ", ".join(f"{k} {v[:10]}" for k, v in sorted(res["measured"].items())) + ".")
    la = res.get("launch", [])
    if la:
        by = {(r["launcher"], r["nproc"]): r for r in la}
        out += ["**Launch to exit** (`--standalone`, no-op workers `--no-python /bin/true`) and the launcher's own "
                "peak RSS:", "",
                "| launcher | workers | time | peak RSS | trun is faster | trun uses less memory |",
                "|---|---|---|---|---|---|"]
        for r in la:
            t = by.get(("trun", r["nproc"]))
            fast = ratio(r["wall_ms"], t["wall_ms"]) if t and r["launcher"] != "trun" else ""
            mem = ratio(r["peak_rss_mib"], t["peak_rss_mib"]) if t and r["launcher"] != "trun" else ""
            out.append(f"| {r['launcher']} | {r['nproc']} | {r['wall_ms']:.1f} ms | {r['peak_rss_mib']:.1f} MiB "
                       f"| {fast} | {mem} |")
        out.append("")
    rs = res.get("restart", [])
    if rs:
        by = {r["launcher"]: r for r in rs}
        out += ["**Restart**: a worker's crash to its replacement's first Python statement (2 workers, "
                "`--max-restarts 1`, interpreter start included):", "",
                "| launcher | crash to replacement | trun is faster |", "|---|---|---|"]
        for r in rs:
            f = ratio(r["crash_to_restart_ms"], by["trun"]["crash_to_restart_ms"]) if "trun" in by and r["launcher"] != "trun" else ""
            out.append(f"| {r['launcher']} | {r['crash_to_restart_ms']:.1f} ms | {f} |")
        out.append("")
    st = res.get("store", [])
    if st:
        by = {(r["server"], r["clients"]): r for r in st}
        out += ["**TCPStore server** under `trun-store bench` (closed loop, one request in flight per client, "
                "mix set=40,get=40,add=20, 32-byte values; the load generator shares the 2 CPUs):", "",
                "| server | clients | ops/s | p50 | p99 | p99.9 | trun ops/s ratio | trun p99 ratio |",
                "|---|---|---|---|---|---|---|---|"]
        for r in st:
            t = by.get(("trun", r["clients"]))
            a = ratio(t["ops_per_sec"], r["ops_per_sec"]) if t and r["server"] != "trun" else ""
            b = ratio(t["p99_us"], r["p99_us"]) if t and r["server"] != "trun" else ""
            out.append(f"| {r['server']} | {r['clients']} | {r['ops_per_sec']:.0f} | {r['p50_us']:.0f} us | "
                       f"{r['p99_us']:.0f} us | {r['p999_us']:.0f} us | {a} | {b} |")
        out.append("")
        out += plot(path[:-5] + "-store.png", "TCPStore ops/s and p99 vs clients", path, readme_dir)
    rz = res.get("rdzv", [])
    if rz:
        by = {(r["mode"], r["agents"]): r for r in rz}
        modes = [m for m in ("trun-fast", "trun-c10d", "torchrun-1.13", "torchrun-2.6") if any(k[0] == m for k in by)]
        sizes = sorted({r["agents"] for r in rz})
        out += ["**Rendezvous**: agents as threads of one process (`build/trun-rdzv-bench`; torchrun's own "
                "`DynamicRendezvousHandler` in `bench/rdzv_torch.py`), all against one `trun-store`; time from the "
                "last agent's join to the last rank assigned, and the bytes the store read and wrote (its "
                "`/proc/<pid>/io`). A blank cell: not run at that size (or did not finish within join_timeout, "
                "see below).", "",
                "| agents | " + " | ".join(modes) + " |", "|---" * (len(modes) + 1) + "|"]
        for n in sizes:
            cells = []
            for m in modes:
                r = by.get((m, n))
                cells.append(f"{r['seconds']:.3f} s, {r['store_bytes'] / 1e6:.2f} MB" if r else "")
            out.append(f"| {n} | " + " | ".join(cells) + " |")
        out.append("")
        for n in sizes:
            for other in ("torchrun-1.13", "torchrun-2.6"):
                o = by.get((other, n))
                for mine in ("trun-c10d", "trun-fast"):
                    t = by.get((mine, n))
                    if o and t:
                        out.append(f"- {n} agents, {mine} vs {other}: {ratio(o['seconds'], t['seconds'])} faster, "
                                   f"{ratio(o['store_bytes'], t['store_bytes'])} fewer store bytes.")
        for f in res.get("rdzv_failed", []):
            out.append(f"- {f}")
        if any("runs_seconds" not in r and r.get("reps", 1) % 2 == 0 for r in rz):
            out.append("- The rows of 2 runs in this file show the slower run, not a median, and its modes ran one "
                       "after another (the bench.py of that run); bench.py now runs the modes interleaved, 3 times "
                       "each, and takes the median.")
        out.append("")
        out += plot(path[:-5] + "-rdzv.png", "Rendezvous time vs agents, log-log", path, readme_dir)
    rc = res.get("recovery", [])
    if rc:
        by = {(r["launcher"], r["kind"]): r for r in rc}
        kinds = [k for k in ("crash", "silent") if any(r["kind"] == k for r in rc)]
        names = {"crash": "crash (every process of the node SIGKILLed)",
                 "silent": "silent (the node's link down: nothing reset)"}
        out += ["**Recovery**: 3 nodes in network namespaces, `--nnodes 2:3 --max-restarts 3`, default settings, "
                "gloo workers doing an all-reduce every 0.1 s (`bench/recovery.py`); node 2 is lost; time until "
                "both survivors' workers all-reduce in a world of 2 (median):", "",
                "| launcher | " + " | ".join(names[k] for k in kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
        for b in ("torchrun-1.13", "trun-c10d", "trun-trun"):
            if not any((b, k) in by for k in kinds):
                continue
            cells = []
            for k in kinds:
                r, o = by.get((b, k)), by.get(("torchrun-1.13", k))
                if r is None:
                    cells.append("")
                    continue
                c = (f"{r['seconds']:.2f} s" if r["seconds"] is not None else
                     f"none in {r['cap_seconds']:.0f} s ({r['recovered']} of {r['reps']} recovered)")
                if b != "torchrun-1.13" and o and r["seconds"]:
                    c += (f" ({ratio(o['seconds'], r['seconds'])} faster)" if o["seconds"] is not None else
                          f" (torchrun: none in {o['cap_seconds']:.0f} s)")
                cells.append(c)
            out.append(f"| {b} | " + " | ".join(cells) + " |")
        out.append("")
    sp = res.get("spare", [])
    if sp:
        by = {(r["launcher"], r["kind"]): r for r in sp}
        kinds = [k for k in ("crash", "silent") if any(r["kind"] == k for r in sp)]
        out += ["**Spare takeover**: 4 nodes in network namespaces, `--nnodes 3:3 --max-restarts 3` (the 4th "
                "waits as a spare), gloo workers doing an all-reduce every 0.1 s (`bench/spare.py`); node 2 is "
                "lost; time until the two survivors and the spare all-reduce in a world of 3 (median):", "",
                "| launcher | " + " | ".join(k for k in kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
        for b in ("torchrun-1.13", "trun-c10d", "trun-trun"):
            if any((b, k) in by for k in kinds):
                out.append(f"| {b} | " + " | ".join(
                    "" if (b, k) not in by else
                    (f"{by[(b, k)]['seconds']:.2f} s" if by[(b, k)]["seconds"] is not None else
                     f"none in {by[(b, k)]['cap_seconds']:.0f} s") for k in kinds) + " |")
        out.append("")
    for r in res.get("conns", []):
        out.append(f"- {r['server']}: {r['connections']} connections each with a pending WAIT: "
                   f"{r['rss_held_kb'] / 1024:.1f} MiB RSS; all {r['released']} released by one SET.")
    out.append("")
    return "\n".join(out)


def hang_line(hg):
    """bench/gpu_hang.py's runs (gpu.py step hang) in one line: per kind and launcher, seconds from the hang to
    the culprit named and to training again; "" when there are none."""
    if not hg or not hg.get("runs"):
        return ""
    sec = lambda x: "never" if x is None else f"{x:.1f} s"
    parts = [f"{r['kind']} {r['launcher']}: named {sec(r['named_s'])} ({r['trun_culprit'] or r['root_cause'] or 'no rank'})"
             f", training again {sec(r['restarted_s'])}" for r in hg["runs"]]
    return (f"- Collective hangs (`bench/gpu_hang.py`, the last of {hg['gpus']} ranks hangs; torch's process-group "
            f"timeout {hg['pg_timeout_s']} s, trun `--hang-timeout {hg['hang_timeout_s']}`; seconds from the hang): "
            + "; ".join(parts) + ".")


def render_gpu(path, readme_dir):
    g = json.load(open(path))
    st = g["steps"]
    only = g.get("gpu_steps") or ("onegpu" if set(st) == {"onegpu"} else "all")
    cmd = "bash bench/gpu.sh" if only == "all" else f"GPU_STEPS={only} bash bench/gpu.sh"
    out = [f"**GPU box** (`{cmd}`, one device call; torch {g['torch']}, {g['gpus']} x {g['gpu_name']}); "
           f"file `{os.path.relpath(path, REPO)}`:", ""]
    la = {(r["launcher"], r.get("nproc", 2)): r for r in st.get("launch", [])}
    for n in (2, 8):
        t, o = la.get(("trun", n)), la.get(("torchrun-2.11", n))
        if t and o:
            out.append(f"- Launch to exit, {n} no-op workers: trun {t['wall_ms']:.1f} ms / {t['peak_rss_mib']:.1f} MiB, "
                       f"torchrun 2.11 {o['wall_ms']:.0f} ms / {o['peak_rss_mib']:.0f} MiB: "
                       f"{ratio(o['wall_ms'], t['wall_ms'])} faster, {ratio(o['peak_rss_mib'], t['peak_rss_mib'])} "
                       f"less memory.")
    if "env" in st:
        diffs = [ln.split("DIFFERENCE ", 1)[1] for ln in st["env"].get("report", []) if "DIFFERENCE" in ln]
        only_trun = sorted({d.split("only trun sets ", 1)[1] for d in diffs if "only trun sets NCCL_" in d})
        decided = [d.split(":", 1)[1] for d in st["env"].get("trun_decisions", [])]
        if st["env"]["identical"] and decided:
            out.append("- Worker environment: torchrun 2.11's, variable for variable, plus the NCCL variables trun "
                       "decides for this node (`--explain`, source trun): " + ", ".join(f"`{v}`" for v in decided) + ".")
        elif st["env"]["identical"]:
            out.append("- Worker environment identical to torchrun 2.11's: True.")
        elif only_trun and all("only trun sets NCCL_" in d for d in diffs):
            out.append("- Worker environment: torchrun 2.11's, variable for variable, plus the NCCL variables trun "
                       "decides for this node (`--explain`): " + ", ".join(f"`{v}`" for v in only_trun) + ".")
        else:
            out.append("- Worker environment differences from torchrun 2.11: " + "; ".join(diffs) + ".")
    if "health" in st:
        h = st["health"]
        la = h.get("launch", {})
        out.append(f"- Node health gate (`trun-topo health --json`, median of 5): {h['elapsed_ms_median']:.1f} ms for "
                   f"{len(h['checks'])} checks on {h['gpus']} GPU(s) (" +
                   ", ".join(f"{c['name']} {c['status']}" for c in h["checks"]) + ")" +
                   (f"; launch to exit with `--health-check fail` {la['fail']['wall_ms_median']:.1f} ms vs off "
                    f"{la['off']['wall_ms_median']:.1f} ms" if "fail" in la and "off" in la else "") + ".")
    if "nccl" in st and st["nccl"].get("gpus", 2) >= 2:
        for name in ("trun", "torchrun-2.11"):
            n = st["nccl"].get(name)
            if n:
                out.append(f"- NCCL all-reduce through {name}: " + "; ".join(n["lines"]))
    if "interop" in st:
        i = st["interop"]
        note = "" if i.get("ops_identical") else (
            " (see the -ops-diff.txt beside it: torch's libuv server closes on values over 8 MiB, trun-store takes "
            "up to 64 MiB like the classic server)")
        out.append(f"- torch 2.11 Python client, every op against torch's libuv server and trun-store: identical = "
                   f"{i.get('ops_identical')}{note}. Waiters and 40 concurrent adders passed on both.")
    pf = st.get("preflight", {})
    if pf.get("preflight") and pf["preflight"].get("verdict", "").startswith("SKIP"):
        out.append(f"- Preflight on {pf.get('gpus')} GPU: {pf['preflight']['verdict']}.")
    elif pf.get("preflight"):
        p = pf["preflight"]
        peak = max(p["results"], key=lambda r: r["busbw"])
        text = (f"- Preflight (`trun-topo preflight`, NCCL {p['nccl_version']} by dlopen, 8 B..1 GiB): "
                f"{p['verdict']} on {p['fabric']}, peak busbw {peak['busbw']:.1f} GB/s at {peak['bytes']} B; ")
        vs = pf.get("vs_torch") or []
        if vs and pf.get("torch_mode") == "graph":
            # From which size up every size is within 5 % (None: not even the largest).
            tail = next((vs[i] for i in range(len(vs)) if all(within(r) for r in vs[i:])), None)
            text += (f"vs torch 2.11's all-reduce timed in a CUDA graph at {len(vs)} sizes: within 5 % at "
                     f"{sum(within(r) for r in vs)} ({spans(vs, within)})")
            if tail:
                w = max(abs(r["ratio"] - 1) for r in vs[vs.index(tail):])
                text += f", at every size from {size(tail['bytes'])} up within {w * 100:.1f} %"
            off = [r for r in vs if not within(r)]
            if off:
                worst = max(off, key=lambda r: abs(r["ratio"] - 1))
                text += (f"; apart by more at {spans(vs, lambda r: not within(r))} (worst "
                         f"{(worst['ratio'] - 1) * 100:+.1f} % at {size(worst['bytes'])}: {worst['preflight_us']:.1f} "
                         f"vs {worst['torch_us']:.1f} us)")
            out.append(text + ".")
        else:
            out.append(text + f"within 5 % of torch's all-reduce at every size >= 64 MiB: "
                       f"{pf.get('within_5pct_at_64MiB_up')}.")
        ex = pf.get("experiment", {})
        one, two = ex.get("one_pod", {}), ex.get("two_pods", {})
        if one and two:
            out.append(f"- One pod vs two pods through `trun --nccl-report` (2 GPUs): "
                       f"{'; '.join(a for a in one.get('ar', []) if 'bytes=1073741824' in a)} vs "
                       f"{'; '.join(a for a in two.get('ar', []) if 'bytes=1073741824' in a)}; doctor's split warning "
                       f"in the two-pods run: {two.get('doctor_split_warning')}; transports "
                       f"{' / '.join(' '.join(r.split()) for r in one.get('report', [])[:1])} vs "
                       f"{' / '.join(' '.join(r.split()) for r in two.get('report', [])[:1])}.")
            both = [v for c in (two.get("nccl_log_both") or {}).get("communicators", []) for v in c.get("verdicts", [])]
            if both:
                out.append("- `trun-topo --nccl-log` over both pods' NCCL logs: " + "; ".join(both) + ".")
            verd = [ln[len("# verdict: "):] for ln in ex.get("two_pods_preflight", {}).get("verdict", [])
                    if ln.startswith("# verdict: ")]
            if verd:
                out.append(f"- `trun --preflight` in the two-pods layout (judged by the layout it finds, not by the "
                           f"hardware): {verd[0]}.")
    cd = st.get("c10d")
    if cd:
        parts = []
        for case, r in cd.items():
            bw = [a.split("busbw=")[1].split(" mode=")[0] for a in r["ar"] if "bytes=67108864" in a]
            parts.append(f"{case} ({' + '.join(r['agents'])}): exit codes {r['rcs']}, 64 MiB all-reduce "
                         f"{bw[0] if bw else 'n/a'}")
        per = max((r.get("gpus_per_agent", 1) for r in cd.values()), default=1)
        out.append(f"- c10d rendezvous with torchrun 2.11 agents, {'one GPU' if per == 1 else f'{per} GPUs'} each, NCCL "
                   "all-reduce: " + "; ".join(parts) + ".")
    for kind, what in (("ddp", "DDP"), ("fsdp", "FSDP")):
        dd = st.get(kind)
        if not dd:
            continue
        m = dd["median_step_ms"]
        per = {k: ", ".join(f"{r['median_ms']:.2f}" for r in v) for k, v in dd["runs"].items()}
        example = dd.get("example", f"train_{kind}.py")
        out.append(f"- {what} example (`examples/{example} {' '.join(dd['args'])}`, {dd.get('nproc', 2)} GPUs): median step "
                   f"{m.get('trun'):.2f} ms under trun (runs {per.get('trun')}), {m.get('torchrun-2.11'):.2f} ms under "
                   f"torchrun 2.11 (runs {per.get('torchrun-2.11')}); loss curves identical (max difference "
                   f"{dd['max_loss_diff']}), {dd['loss_first'][0]:.3f} -> {dd['loss_last'][0]:.3f}"
                   + (f"; pairs in alternating order, trun / torchrun: "
                      f"{', '.join(f'{x:.3f}x' for x in dd['pair_ratios'])}" if dd.get("pair_ratios") else "") + ".")
    og = st.get("onegpu", {})
    if og.get("vs_torch") or og.get("ddp"):
        vs, dd = og.get("vs_torch") or [], og.get("ddp") or {}
        text = f"- 1-GPU proxy for issue 6's and 7's 2-GPU figures ({og['layout']}; the two processes time-share " \
               "the GPU"
        floor = min((r["preflight_us"] for r in vs if "preflight_us" in r), default=None)
        text += f", and no all-reduce took less than {floor / 1000:.1f} ms):" if floor else "):"
        if vs:
            worst = max(vs, key=lambda r: abs(r["ratio"] - 1))
            text += (f" preflight vs torch 2.11's all-reduce ({og.get('torch_mode')}) at {len(vs)} sizes: "
                     f"{sum(abs(r['ratio'] - 1) <= 0.05 for r in vs)} within 5 %, worst "
                     f"{(worst['ratio'] - 1) * 100:+.1f} % at {worst['bytes']} B, 1 GiB "
                     f"{vs[-1]['preflight_busbw']:.2f} vs {vs[-1]['torch_busbw']:.2f} GB/s;")
        m = dd.get("median_step_ms") or {}
        if m.get("trun") and m.get("torchrun-2.11"):
            per = {k: ", ".join(f"{r['median_ms']:.2f}" for r in v) for k, v in dd["runs"].items()}
            text += (f" DDP example median step {m['trun']:.2f} ms under trun (runs {per.get('trun')}) vs "
                     f"{m['torchrun-2.11']:.2f} ms under torchrun 2.11 (runs {per.get('torchrun-2.11')}), loss curves "
                     f"identical (max difference {dd['max_loss_diff']}).")
        out.append(text)
    if hang_line(st.get("hang")):
        out.append(hang_line(st.get("hang")))
    sl = st.get("stall")
    if sl and sl.get("stalls"):
        x = sl["stalls"][0]
        out.append(f"- Hang detection (`--stall-timeout 15`, a rank hung before an NCCL all-reduce): rank {x['rank']} "
                   f"flagged after {x['idle_s']:.1f} s, restarted, job exit {sl['rc']}. The ranks left waiting in "
                   f"NCCL used 1 CPU-s per s (NCCL spins), so a collective hang of every rank is not caught by the "
                   f"CPU signal.")
    rows = st.get("store", [])
    if rows:
        by = {(r["server"], r["clients"]): r for r in rows}
        threaded = any(r["server"].startswith("trun-") for r in rows)
        if threaded:
            out += ["", "`trun-Nt` is `trun-store serve --threads N`. Ratios are against torch 2.11's libuv server "
                    "(one loop) at the same number of clients; the load generator runs "
                    f"{st.get('store_load_threads', 8)} loops on the same box.", "",
                    "| server | clients | ops/s | p99 | p99.9 | ops/s vs torch | p99 vs torch |"]
        else:
            out += ["", "| server | clients | ops/s | p99 | p99.9 | trun ops/s ratio | trun p99 ratio |"]
        out.append("|---|---|---|---|---|---|---|")
        for r in rows:
            a = b = ""
            if threaded:  # each trun variant against torch's server at the same clients
                o = by.get(("torch-2.11-libuv", r["clients"]))
                if o and r["server"].startswith("trun"):
                    a, b = ratio(r["ops_per_sec"], o["ops_per_sec"]), f"{r['p99_us'] / o['p99_us']:.2f}x"
            else:  # trun against each other server
                t = by.get(("trun", r["clients"]))
                if t and r["server"] != "trun":
                    a, b = ratio(t["ops_per_sec"], r["ops_per_sec"]), ratio(t["p99_us"], r["p99_us"])
            out.append(f"| {r['server']} | {r['clients']} | {r['ops_per_sec']:.0f} | {r['p99_us']:.0f} us | "
                       f"{r['p999_us']:.0f} us | {a} | {b} |")
        out.append("")
        out += plot(path[:-5] + "-store.png", "TCPStore ops/s and p99 vs clients, GPU box", path, readme_dir)
    busbw = plot(path[:-5] + "-busbw.png", "All-reduce busbw vs size: preflight, torch in a CUDA graph and eager, "
                 "one pod vs two pods; preflight vs torch per size", path, readme_dir)
    out += [""] + busbw if busbw and out[-1] != "" else busbw
    out.append("")
    return "\n".join(out)


def gpu_files():
    """Every GPU box result file (bench/results/<date>-<gpu>[-sN].json), oldest first."""
    files = glob.glob(os.path.join(REPO, "bench", "results", "*.json"))
    return sorted((f for f in files if not f.endswith("-cpu.json")), key=lambda f: f[:-5])


def main():
    ap = argparse.ArgumentParser(description="Writes docs/results.md's results section from the bench result files.")
    ap.add_argument("results", nargs="?", help="the CPU result file (default: the newest bench/results/*-cpu.json)")
    ap.add_argument("--readme", default=os.path.join(REPO, "docs", "results.md"),
                    help="the file with the results markers (default: docs/results.md)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 with a diff when the file's section differs from what it would write")
    args = ap.parse_args()
    path = os.path.abspath(args.results or newest())
    res = json.load(open(path))
    gpus = gpu_files()
    readme = args.readme
    readme_dir = os.path.dirname(os.path.abspath(readme))
    text = open(readme).read()
    if BEGIN not in text or END not in text:
        sys.exit(f"readme.py: {readme} lacks the results markers {BEGIN} / {END}; put them back around the Results")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = "\n".join(render_targets(res, path, gpus)) + "\n" + render(res, path, readme_dir) + \
        "".join("\n" + render_gpu(g, readme_dir) for g in gpus)
    new = head + BEGIN + "\n" + body + END + tail
    if args.check:
        if new == text:
            print(f"{os.path.relpath(readme, REPO)}: results section up to date")
            return
        import difflib
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), readme,
                                                   "bench/readme.py"))
        sys.exit(f"readme.py: {readme}'s results section is not what the committed result files give; run "
                 "bench/readme.py (make bench does) and commit it")
    open(readme, "w").write(new)
    print(f"{os.path.relpath(readme, REPO)}: results from {os.path.relpath(path, REPO)}")


if __name__ == "__main__":
    main()
