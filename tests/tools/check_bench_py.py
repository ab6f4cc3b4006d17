"""Checks the parsing and arithmetic of bench/gpu.py that turn worker output into docs/results.md's GPU ratios,
with canned worker output (no GPU, no processes): ar_lines, vs_torch, gpu_tag, ddp_pairs, parse_nvlinks;
bench/gpu_recovery4.py's NCCL init timings and bench/gpu_nodeloss.py's rounds and timelines; bench/gpu_topo.py's
nvidia-smi parsers on the committed captures of the H200 x2 and H100 x1 boxes; and bench/readme.py's size and
spans. Run by tests/integration/90-bench-readme.sh with OUT set to a scratch dir (gpu.py writes its run.log there).
Exit 0 when every check holds; the first failed check raises AssertionError with what differed."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import gpu  # noqa: E402

os.makedirs(gpu.LOGS, exist_ok=True)

# ar_lines: examples/allreduce_nccl.py's lines; other lines ignored.
text = ("# CUDA graph capture failed (RuntimeError: x); timing eagerly\n"
        "AR n=2 bytes=8 time_us=4515.50 busbw=0.000 GB/s mode=graph\n"
        "AR n=2 bytes=1073741824 time_us=577713.40 busbw=1.859 GB/s mode=graph\n"
        "step 1 loss 4.3\n")
ar = gpu.ar_lines(text)
assert ar == {8: {"busbw": 0.0, "time_us": 4515.5}, 1073741824: {"busbw": 1.859, "time_us": 577713.4}}, ar

# vs_torch: the ratio from the times (busbw 0.000 at 8 B still compares), sizes torch lacks left out.
pre = [{"bytes": 8, "time_us": 4498.7, "busbw": 0.0}, {"bytes": 16, "time_us": 4498.7, "busbw": 0.0},
       {"bytes": 1073741824, "time_us": 577720.3, "busbw": 1.859}]
cmp = gpu.vs_torch(pre, ar, {8: {"busbw": 0.0, "time_us": 5000.0}})
assert [c["bytes"] for c in cmp] == [8, 1073741824], cmp
assert abs(cmp[0]["ratio"] - 4515.5 / 4498.7) < 1e-12 and cmp[0]["torch_eager_busbw"] == 0.0, cmp[0]
assert abs(cmp[1]["ratio"] - 577713.4 / 577720.3) < 1e-12 and cmp[1]["torch_eager_busbw"] is None, cmp[1]

# gpu_tag: nvidia-smi names to the result file's tag.
assert gpu.gpu_tag(["NVIDIA H200", "NVIDIA H200"]) == "h200x2"
assert gpu.gpu_tag(["NVIDIA H100 80GB HBM3"]) == "h100x1"
assert gpu.gpu_tag(["NVIDIA A100-SXM4-80GB"]) == "a100x1"
assert gpu.gpu_tag([]) == "nogpu"

# ddp_pairs: a warm-up, then pairs in alternating order; a failed run counts in no median and no pair.
calls = []
steps = {("trun", 0): 60.0, ("torchrun-2.11", 0): 50.0, ("torchrun-2.11", 1): 52.0, ("trun", 1): 52.0,
         ("trun", 2): 61.0, ("torchrun-2.11", 2): None}


def run(base, extra, tag):
    calls.append(tag)
    if tag.endswith("warmup"):
        return True, ""
    name, rep = tag.split("-", 2)[2].rsplit("-", 1)
    ms = steps[(name, int(rep))]
    if ms is None:
        return False, "Traceback: worker failed\n"
    return True, f"step time: mean {ms + 1:.3f} ms, median {ms:.3f} ms over steps 3..300\n"


d = gpu.ddp_pairs(run, 3, "t-ddp")
assert calls == ["t-ddp-warmup", "t-ddp-trun-0", "t-ddp-torchrun-2.11-0", "t-ddp-torchrun-2.11-1", "t-ddp-trun-1",
                 "t-ddp-trun-2", "t-ddp-torchrun-2.11-2"], calls
assert d["median_step_ms"] == {"trun": 60.0, "torchrun-2.11": 51.0}, d["median_step_ms"]
assert d["pair_ratios"] == [60.0 / 50.0, 1.0], d["pair_ratios"]
assert abs(d["spread"]["trun"] - 9.0 / 60.0) < 1e-12 and abs(d["spread"]["torchrun-2.11"] - 2.0 / 51.0) < 1e-12
assert abs(d["trun_over_torchrun"] - 60.0 / 51.0) < 1e-12 and d["max_loss_diff"] is None, d

# gpu_topo: nvidia-smi `topo -m` (escape codes, one column per GPU) and `-q` from the boxes.
import gpu_topo  # noqa: E402

res = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "results")
h200 = os.path.join(res, "2026-11-22-h200x2-topo")
assert gpu_topo.smi_topo(open(os.path.join(h200, "smi-topo.txt")).read()) == {0: ("0-31", "0"), 1: ("0-31", "0")}
assert gpu_topo.smi_q(open(os.path.join(h200, "smi-q.txt")).read()) == [
    ("GPU-48d0f256-bfd7-7855-41f4-3cef615d1a00", "00000000:00:06.0"),
    ("GPU-fddc5a5a-c92e-0a49-6000-539034ebc4ab", "00000000:00:07.0")]
h100 = os.path.join(res, "2026-11-23-h100x1-topo")
assert gpu_topo.smi_topo(open(os.path.join(h100, "smi-topo.txt")).read()) == {0: ("0-15", "0")}
assert gpu_topo.smi_q(open(os.path.join(h100, "smi-q.txt")).read()) == [
    ("GPU-42920c24-4fbd-a926-1b62-402efd44a614", "00000000:00:06.0")]
# readme.py: sizes as nccl-tests' are read, and runs of neighbouring sizes where a condition holds.
import readme  # noqa: E402

assert [readme.size(b) for b in (8, 1000, 1024, 3 << 10, 524288, 8 << 20, 1 << 30)] == [
    "8 B", "1000 B", "1 KiB", "3 KiB", "512 KiB", "8 MiB", "1 GiB"]
rows = [{"bytes": b, "ratio": x} for b, x in ((8, 0.85), (16, 1.01), (1024, 1.06), (2048, 1.2), (4096, 1.0),
                                             (1 << 30, 1.07))]
assert readme.spans(rows, lambda r: not readme.within(r)) == "8 B, 1 KiB..2 KiB, 1 GiB", readme.spans(
    rows, lambda r: not readme.within(r))
assert readme.spans(rows, readme.within) == "16 B, 4 KiB" and readme.spans(rows, lambda r: False) == ""
# readme.py's line for gpu.py's hang step (bench/gpu_hang.py's runs): a run never named says so.
hg = {"gpus": 4, "pg_timeout_s": 60, "hang_timeout_s": 10, "runs": [
    {"launcher": "trun", "kind": "sleep", "named_s": 17.64, "restarted_s": 33.0, "trun_culprit": "rank 3 (local 3, pid 9)",
     "root_cause": "rank 3"},
    {"launcher": "torchrun-2.11", "kind": "sleep", "named_s": 45.2, "restarted_s": None, "trun_culprit": None,
     "root_cause": "rank 0"},
    {"launcher": "trun", "kind": "spin", "named_s": None, "restarted_s": None, "trun_culprit": None, "root_cause": None}]}
line = readme.hang_line(hg)
assert line.startswith("- Collective hangs (`bench/gpu_hang.py`, the last of 4 ranks hangs; torch's process-group "
                       "timeout 60 s, trun `--hang-timeout 10`"), line
assert "sleep trun: named 17.6 s (rank 3 (local 3, pid 9)), training again 33.0 s" in line, line
assert "sleep torchrun-2.11: named 45.2 s (rank 0), training again never" in line, line
assert "spin trun: named never (no rank), training again never." in line, line
assert readme.hang_line({}) == "" and readme.hang_line(None) == ""
# gpu.py's nvidia-smi nvlink -s parser: active links with their speed, inactive ones counted apart.
links = gpu.parse_nvlinks("GPU 0: NVIDIA H200 (UUID: GPU-a)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n"
                          "GPU 1: NVIDIA H200 (UUID: GPU-b)\n\t Link 0: <inactive>\n\t Link 1: 26.562 GB/s\n")
assert links == {0: {"active": 2, "inactive": 0, "gbps": [26.562, 26.562]},
                 1: {"active": 1, "inactive": 1, "gbps": [26.562]}}, links
assert gpu.parse_nvlinks("NVIDIA-SMI has failed\n") == {}
# gpu_recovery4.py: NCCL's "Init timings" line of each process, by attempt and rank from the pids.
import json  # noqa: E402
import tempfile  # noqa: E402

import gpu_recovery4  # noqa: E402

d = tempfile.mkdtemp(dir=os.environ.get("OUT"))
gpu_recovery4.LOGS = d
json.dump({"pid": 123}, open(os.path.join(d, "ready.1.0"), "w"))
json.dump({"pid": 77}, open(os.path.join(d, "ready.0.0"), "w"))
open(os.path.join(d, "nccl.host.a.123.log"), "w").write(
    "host:123:456 [0] NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 4 total 0.72 (kernels 0.10, "
    "alloc 0.01, bootstrap 0.03, allgathers 0.00, topo 0.30, graphs 0.01, connections 0.25, rest 0.02)\n")
open(os.path.join(d, "nccl.host.a.77.log"), "w").write("host:77:78 [0] NCCL INFO cudaDriverVersion 12080\n")
init = gpu_recovery4.nccl_init_timings(d, 1, 1, "cfg")
assert list(init) == ["1"] and init["1"][0]["total"] == 0.72 and init["1"][0]["topo"] == 0.3, init
assert init["1"][0]["connections"] == 0.25 and init["1"][0]["nranks"] == 4, init
assert "attempt 1 rank 0 pid 123: " in open(os.path.join(d, "cfg-nccl-init.txt")).read()
assert gpu_recovery4.nccl_init_timings(tempfile.mkdtemp(dir=d), 1, 1, "none") is None
# gpu_nodeloss.py: the first round after an event, complete only when every rank of that world all-reduced.
import gpu_nodeloss  # noqa: E402

d = tempfile.mkdtemp(dir=os.environ.get("OUT"))
lines = [{"pid": 1, "node": "node0", "rank": 0, "world": 4, "preloaded": False, "t0": 10, "import": 11, "cuda": 12,
          "pg": 13, "ready": 14},
         {"pid": 2, "node": "node0", "rank": 0, "world": 2, "preloaded": True, "t0": 20.5, "import": 20.5,
          "cuda": 20.6, "pg": 20.8, "ready": 21.0},
         {"pid": 3, "node": "node0", "rank": 1, "world": 2, "preloaded": True, "t0": 20.5, "import": 20.5,
          "cuda": 20.6, "pg": 20.8, "ready": 21.2}]
open(os.path.join(d, "ready.jsonl"), "w").write("".join(json.dumps(x) + "\n" for x in lines) + "{torn")
assert gpu_nodeloss.round_after(d, 20, 4) is None and gpu_nodeloss.round_after(d, 25, 2) is None
got = gpu_nodeloss.round_after(d, 20, 2)
assert sorted(got) == [0, 1], got
evs = [{"event": "worker_exit", "t": 20.1}, {"event": "worker_start", "t": 20.4}, {"event": "old", "t": 1.0}]
tl = gpu_nodeloss.timeline(got, evs, 20.0)
assert tl["workers_ready_ms"] == [1000.0, 1200.0] and tl["started_warm"] == 2, tl
assert tl["worker_exits_ms"] == [100.0] and tl["worker_starts_ms"] == [400.0] and "old" not in tl["events_first_ms"], tl
print("bench/gpu.py helpers: ar_lines, vs_torch, gpu_tag, ddp_pairs, parse_nvlinks ok; gpu_topo parsers ok; "
      "gpu_recovery4 nccl_init_timings ok; gpu_nodeloss round_after, timeline ok; readme.py size, spans, hang_line ok")
