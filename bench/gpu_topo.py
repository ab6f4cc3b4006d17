"""trun-topo against nvidia-smi on the GPU box, in one short device call (~1 min):

  OUT=... python3 bench/gpu_topo.py      (TRUN_BIN: the build/portable binaries; default build/portable)

Writes $OUT/<date>-<gpu>-topo/: nvidia-smi's `topo -m` and `-q`, each GPU's sysfs numa_node, `trun-topo` (text
and --json) with NVML, `trun-topo --json` with NVML hidden (TRUN_NVML_LIBRARY=/nonexistent: the CUDA runtime
fallback, libcudart from torch's nvidia packages), and compare.json / compare.txt: per GPU, what nvidia-smi
says next to what each trun-topo source says (UUID, PCI bus id, CPU affinity, NUMA affinity), and whether
they agree. NUMA: nvidia-smi's 'NUMA Affinity' column against trun-topo's numa_node, which trun derives from
the CPU affinity where sysfs reads -1 (VMs). Exit 0 when everything agrees, 1 otherwise.
"""
import datetime
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from gpu import gpu_names, gpu_tag, torch_nccl_libs  # noqa: E402

BIN = os.environ.get("TRUN_BIN", os.path.join(REPO, "build", "portable"))
OUT = os.environ.get("OUT") or os.path.join(REPO, "build", "gpu-results")
DIR = os.path.join(OUT, f"{datetime.date.today().isoformat()}-{gpu_tag(gpu_names())}-topo")


def save(name, cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    open(os.path.join(DIR, name), "w").write(r.stdout + (("\n# stderr:\n" + r.stderr) if r.stderr else ""))
    return r


def smi_topo(text):
    """{gpu index: (cpu affinity, numa affinity)} from `nvidia-smi topo -m` (columns CPU/NUMA Affinity)."""
    rows = {}
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in text.splitlines()]
    head = next((ln for ln in lines if "CPU Affinity" in ln), None)
    if head is None:
        return rows
    cols = [c.strip() for c in head.split("\t") if c.strip()]
    for ln in lines:
        m = re.match(r"^GPU(\d+)\t", ln)
        if m:
            cells = [c.strip() for c in ln.split("\t")[1:]]
            cells = cells[:len(cols)]
            d = dict(zip(cols, cells))
            rows[int(m.group(1))] = (d.get("CPU Affinity"), d.get("NUMA Affinity"))
    return rows


def smi_q(text):
    """[(uuid, bus id)] in GPU order from `nvidia-smi -q`."""
    uu = re.findall(r"GPU UUID\s*:\s*(\S+)", text)
    bus = re.findall(r"^\s+Bus Id\s*:\s*(\S+)", text, re.M)
    return list(zip(uu, bus))


def main():
    os.makedirs(DIR, exist_ok=True)
    topo = save("smi-topo.txt", ["nvidia-smi", "topo", "-m"]).stdout
    q = save("smi-q.txt", ["nvidia-smi", "-q"]).stdout
    sysfs = {}
    for uuid, bus in smi_q(q):
        dom, rest = bus.lower().split(":", 1)
        path = f"/sys/bus/pci/devices/{dom[-4:]}:{rest}/numa_node"
        try:
            sysfs[bus] = int(open(path).read().strip())
        except OSError as e:
            sysfs[bus] = f"{path}: {e.strerror}"
    json.dump(sysfs, open(os.path.join(DIR, "sysfs-numa.json"), "w"), indent=1)
    save("trun-topo.txt", [os.path.join(BIN, "trun-topo"), "--no-imds"])
    src = {"nvml": save("trun-topo.json", [os.path.join(BIN, "trun-topo"), "--no-imds", "--json"])}
    libs = torch_nccl_libs()
    env = dict(os.environ, TRUN_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1", **libs)
    src["cudart"] = save("trun-topo-cudart.json", [os.path.join(BIN, "trun-topo"), "--no-imds", "--json"], env=env)
    smi = smi_q(q)
    aff = smi_topo(topo)
    rows, ok = [], bool(smi)
    for kind, r in src.items():
        try:
            j = json.loads(r.stdout)
        except ValueError:
            rows.append({"source": kind, "error": f"no JSON (exit {r.returncode}): {r.stderr[-300:]}"})
            ok = False
            continue
        if len(j["gpus"]) != len(smi):
            ok = False
        for i, g in enumerate(j["gpus"]):
            want_uuid, want_bus = smi[i] if i < len(smi) else (None, None)
            cpu, numa = aff.get(i, (None, None))
            row = {"source": kind, "gpu_source": j.get("gpu_source"), "index": i,
                   "uuid": [g.get("uuid"), want_uuid], "pci_bus_id": [g.get("pci_bus_id"), want_bus],
                   "cpu_affinity": [g.get("cpu_affinity"), cpu], "numa_node": [g.get("numa_node"), numa],
                   "sysfs_numa_node": sysfs.get(want_bus)}
            row["agree"] = (row["uuid"][0] == want_uuid and str(row["pci_bus_id"][0]).lower() == str(want_bus).lower()
                            and row["cpu_affinity"][0] == cpu and str(row["numa_node"][0]) == str(numa)
                            and j.get("gpu_source") == kind)
            ok = ok and row["agree"]
            rows.append(row)
    json.dump({"agree": ok, "rows": rows}, open(os.path.join(DIR, "compare.json"), "w"), indent=1)
    with open(os.path.join(DIR, "compare.txt"), "w") as f:
        for r in rows:
            line = " ".join(f"{k}={v}" for k, v in r.items())
            f.write(line + "\n")
            print(line)
        f.write(f"agree: {ok}\n")
    print(f"agree: {ok}; files in {DIR}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
