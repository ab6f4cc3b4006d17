"""Turns the pod template of a rendered k8s/ manifest into the Pod its controller would create, for
`podman kube play` (tests/integration/79-pod-kube-play.sh). Reads `kubectl kustomize` output on stdin; the
Indexed Job (batch/v1 Job) or the JobSet's first replicated Job; writes pod INDEX as YAML on stdout.

  k8s_pod.py INDEX IMAGE NAME=IP... [--steps N]

What the controller and the cluster would add: the pod's name and host name (<job>-<index>, JobSet's
<jobset>-<job>-0-<index>), the completion-index annotation that PET_NODE_RANK reads through its fieldRef, and
the DNS records of the headless Service, given here as hostAliases (NAME=IP: the pods' <host>.<subdomain>
names; podman has no cluster DNS). What this machine lacks, changed and said on stderr: the image, the
extended resources (nvidia.com/gpu, vpc.amazonaws.com/efa: no device plugin), PET_NPROC_PER_NODE=gpu (no
GPU: 1 worker), the script's --steps (N, default 5), the container's ports (only informational in
Kubernetes; podman 4.3's kube play would publish them on this host), and the emptyDir volumes' names (podman
4.3 makes each a named volume on disk, shared by every pod that names it: prefixed with the pod's name, each
pod has its own, as in Kubernetes; /dev/shm is then a directory on disk, not 64 MiB of memory). Everything else is the manifest's own.
Exit: 0, 2 bad usage or a manifest without the expected objects."""
import sys

import yaml


def fail(msg):
    print(f"k8s_pod.py: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    args = sys.argv[1:]
    steps = "5"
    if "--steps" in args:
        i = args.index("--steps")
        steps = args[i + 1]
        del args[i:i + 2]
    if len(args) < 3:
        fail("usage: k8s_pod.py INDEX IMAGE NAME=IP... [--steps N] < rendered.yaml")
    index, image = int(args[0]), args[1]
    aliases = {}
    for a in args[2:]:
        name, _, ip = a.partition("=")
        if not ip:
            fail(f"'{a}' is not NAME=IP")
        aliases.setdefault(ip, []).append(name)
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
    job = next((d for d in docs if d.get("kind") == "Job"), None)
    jobset = next((d for d in docs if d.get("kind") == "JobSet"), None)
    if job is not None:
        tmpl = job["spec"]["template"]
        pod_name = f"{job['metadata']['name']}-{index}"
    elif jobset is not None:
        rj = jobset["spec"]["replicatedJobs"][0]
        tmpl = rj["template"]["spec"]["template"]
        pod_name = f"{jobset['metadata']['name']}-{rj['name']}-0-{index}"
    else:
        fail("no Job or JobSet in the input")
    spec = tmpl["spec"]
    meta = tmpl.get("metadata") or {}
    spec["hostname"] = pod_name
    spec["hostAliases"] = [{"ip": ip, "hostnames": names} for ip, names in aliases.items()]
    (c,) = spec["containers"]
    print(f"k8s_pod.py: pod {pod_name}: image {c['image']} -> {image}", file=sys.stderr)
    c["image"] = image
    for kind in ("limits", "requests"):
        res = c.get("resources", {}).get(kind, {})
        for r in [r for r in res if "/" in r]:
            print(f"k8s_pod.py: pod {pod_name}: {kind} {r}: {res.pop(r)} dropped (no device plugin)", file=sys.stderr)
    for e in c.get("env", []):
        if e["name"] == "PET_NPROC_PER_NODE" and e.get("value") == "gpu":
            print(f"k8s_pod.py: pod {pod_name}: PET_NPROC_PER_NODE gpu -> 1 (no GPU here)", file=sys.stderr)
            e["value"] = "1"
    if c.pop("ports", None):
        # Informational in Kubernetes (pod IPs are reachable on every port); podman 4.3 would publish them
        # on this host, where two pods cannot both bind 29500.
        print(f"k8s_pod.py: pod {pod_name}: ports dropped (podman would publish them on the host)", file=sys.stderr)
    # podman 4.3 makes an emptyDir a named volume on disk (medium: Memory or not), one per name on the host:
    # named after the pod, each pod keeps its own as in Kubernetes.
    renamed = {}
    for v in spec.get("volumes", []):
        if "emptyDir" in v:
            renamed[v["name"]] = v["name"] = f"{pod_name}-{v['name']}"
    for m in c.get("volumeMounts", []):
        m["name"] = renamed.get(m["name"], m["name"])
    if renamed:
        print(f"k8s_pod.py: pod {pod_name}: emptyDir volumes {', '.join(renamed.values())} (podman: on disk, "
              "one per pod)", file=sys.stderr)
    a = c.get("args", [])
    if "--steps" in a:
        a[a.index("--steps") + 1] = steps
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "labels": meta.get("labels", {}),
            "annotations": {**meta.get("annotations", {}), "batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": spec,
    }
    yaml.safe_dump(pod, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
