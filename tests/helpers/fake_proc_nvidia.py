"""Writes what the NVIDIA driver shows in /proc for the GPUs of a fake-NVML JSON file (tests/fakes/nvml_shim.c):
ROOT/sys/kernel/random/boot_id, ROOT/driver/nvidia/version and params, and ROOT/driver/nvidia/gpus/<bus>/
information with each GPU's model, UUID and bus location; trun reads ROOT through TRUN_PROC_ROOT (the per-boot
GPU cache's key). Usage: fake_proc_nvidia.py NVML_JSON ROOT [BOOT_ID]"""
import json
import os
import sys

gpus = json.load(open(sys.argv[1]))["gpus"]
root = sys.argv[2]
boot = sys.argv[3] if len(sys.argv) > 3 else "5a1e0c3d-7b2f-4e61-9d8a-0c4b3a2f1e0d"
os.makedirs(os.path.join(root, "sys/kernel/random"), exist_ok=True)
with open(os.path.join(root, "sys/kernel/random/boot_id"), "w") as f:
    f.write(boot + "\n")
nv = os.path.join(root, "driver/nvidia")
os.makedirs(os.path.join(nv, "gpus"), exist_ok=True)
with open(os.path.join(nv, "version"), "w") as f:
    f.write("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  (fake)\nGCC version:  gcc 12\n")
with open(os.path.join(nv, "params"), "w") as f:
    f.write("ResmanDebugLevel: 4294967295\nRegistryDwords: \"\"\n")
for i, g in enumerate(gpus):
    bus = (g.get("pci") or "00000000:%02x:00.0" % (0x10 + i))[4:].lower()
    d = os.path.join(nv, "gpus", bus)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "information"), "w") as f:
        f.write("Model: \t\t %s\nIRQ:   \t\t 0\nGPU UUID: \t %s\nBus Type: \t PCIe\nBus Location: \t %s\n"
                "Device Minor: \t %d\n" % (g.get("name", ""), g["uuid"], bus, i))
