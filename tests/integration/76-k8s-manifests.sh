#!/usr/bin/env bash
# Every kustomization under k8s/ (4 bases: Trainer v2, PyTorchJob v1, JobSet, Indexed Job + Service; and their
# p4d / p5 / g5 overlays) renders with `kubectl kustomize` and validates against the Kubernetes OpenAPI schemas
# (npm kubernetes-models: ajv validators compiled from the Kubernetes OpenAPI spec; tests/tools/k8s_validate.mjs).
# Job and Service are validated whole; for JobSet, PyTorchJob, TrainJob and ClusterTrainingRuntime, whose CRD
# schemas no Debian or npm package ships, the core objects they embed (Job/Pod templates, resources) are.
# Every rendering also passes the unknown-field check (tests/tools/k8s_fields.py: every key a field of its
# model in Debian's python3-kubernetes, as kubectl --validate=strict; the schemas above allow unknown keys).
# Then: both checks are live (broken renderings must be rejected), and each overlay asks for what its
# instance type has (GPUs, EFA devices, nodeSelector), with trun as the entrypoint, IPC_LOCK, /dev/shm as a
# memory emptyDir and no hostIPC in every pod template.
# Needs what scripts/deps-k8s.sh installs (`make deps`): node, $TRUN_NPM_DIR (default /var/cache/trun/npm) with
# kubernetes-models, yaml and bin/kubectl (upstream 1.32; Debian bookworm's 1.20 cannot render `patches:`),
# python3-kubernetes and python3-yaml. Missing, they are a failure, not a skip.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=${TRUN_REPO:-$(cd "$here/../.." && pwd)}
npm_dir=${TRUN_NPM_DIR:-/var/cache/trun/npm}
host_py=${TRUN_HOST_PY:-/usr/bin/python3}
kubectl=${TRUN_KUBECTL:-$npm_dir/bin/kubectl}
tmp=$(mktemp -d /tmp/trun-k8s-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
deps="the deps step installs it (run 'make deps': scripts/deps-k8s.sh)"

[ -x "$kubectl" ] || fail "no kubectl at $kubectl: $deps"
command -v node >/dev/null || fail "no node: $deps"
[ -f "$npm_dir/node_modules/kubernetes-models/package.json" ] || fail "no kubernetes-models in $npm_dir/node_modules: $deps"
"$host_py" -c 'import yaml' 2>/dev/null || fail "no PyYAML for $host_py: $deps"
"$host_py" -c 'import kubernetes.client.models' 2>/dev/null || fail "no python3-kubernetes for $host_py: $deps"
echo "renderer: $("$kubectl" version --client 2>/dev/null | tr '\n' ' ')"
validate() { node "$repo/tests/tools/k8s_validate.mjs" "$npm_dir" "$@"; }
fields() { "$host_py" "$repo/tests/tools/k8s_fields.py" "$@"; }

# 1. render + validate every kustomization
n=0
while IFS= read -r k; do
  d=$(dirname "$k")
  rel=${d#"$repo"/}
  out=$tmp/$(echo "$rel" | tr / _).yaml
  "$kubectl" kustomize "$d" >"$out" 2>"$tmp/err" || fail "$rel: kubectl kustomize failed: $(cat "$tmp/err")"
  [ ! -s "$tmp/err" ] || fail "$rel: kubectl kustomize warned: $(cat "$tmp/err")"
  validate "$rel" <"$out" || fail "$rel: schema validation failed"
  fields "$rel" <"$out" || fail "$rel: unknown fields"
  n=$((n + 1))
done < <(find "$repo/k8s" -name kustomization.yaml | sort)
[ $n -eq 16 ] || fail "expected 16 kustomizations (4 bases, 12 overlays), found $n"
echo "ok: $n kustomizations rendered, validated and free of unknown fields"

# 2. the validator rejects broken manifests (it is not a no-op)
reject() {
  local what=$1 src=$2 expr=$3
  sed "$expr" "$tmp/$src.yaml" >"$tmp/bad.yaml"
  ! cmp -s "$tmp/bad.yaml" "$tmp/$src.yaml" || fail "mutation '$what' changed nothing in $src"
  if validate "bad-$what" <"$tmp/bad.yaml" >/dev/null 2>&1; then fail "the validator accepted $what"; fi
  echo "ok: rejected $what"
}
reject "a string containerPort" k8s_jobset_overlays_p5 's/containerPort: 29500/containerPort: many/'
reject "a bad quantity" k8s_pytorchjob_overlays_g5 's/sizeLimit: 32Gi/sizeLimit: lots/'
reject "an unknown completionMode" k8s_indexed-job_base 's/completionMode: Indexed/completionMode: Indexd/'
reject "a bad GPU count" k8s_trainer-v2_overlays_p4d 's/nvidia.com\/gpu: 8/nvidia.com\/gpu: eight/'
# misspelt field names: the unknown-field check names each one with its path
reject_field() {
  local what=$1 src=$2 expr=$3 path=$4
  sed "$expr" "$tmp/$src.yaml" >"$tmp/bad.yaml"
  ! cmp -s "$tmp/bad.yaml" "$tmp/$src.yaml" || fail "mutation '$what' changed nothing in $src"
  if fields "bad-$what" <"$tmp/bad.yaml" >/dev/null 2>"$tmp/fields.err"; then fail "the field check accepted $what"; fi
  grep -qF "$path: unknown field" "$tmp/fields.err" || fail "$what: no '$path: unknown field' in: $(cat "$tmp/fields.err")"
  echo "ok: rejected $what ($path)"
}
reject_field "resoures in a JobSet container" k8s_jobset_overlays_p5 's/^\( *\)resources:/\1resoures:/' \
  "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resoures"
reject_field "volumeMount in a PyTorchJob container" k8s_pytorchjob_overlays_g5 's/volumeMounts:/volumeMount:/' \
  "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].volumeMount"
reject_field "completionmode in a Job" k8s_indexed-job_base 's/completionMode:/completionmode:/' \
  "Job.spec.completionmode"
reject_field "clusterIp in a Service" k8s_indexed-job_base 's/clusterIP:/clusterIp:/' "Service.spec.clusterIp"
reject_field "limit in a TrainJob's resources" k8s_trainer-v2_overlays_p4d 's/^\( *\)limits:/\1limit:/' \
  "spec.trainer.resourcesPerNode.limit"

# 3. what each pod asks for, per overlay
"$host_py" - "$tmp" <<'EOF' || fail "manifest content"
import glob, os, sys, yaml
want = {"p4d": ("p4d.24xlarge", 8, 4), "p5": ("p5.48xlarge", 8, 32), "g5": ("g5.48xlarge", 8, 1)}
def pod_templates(o):
    k, s = o["kind"], o["spec"]
    if k == "Job": return [s["template"]]
    if k == "JobSet": return [rj["template"]["spec"]["template"] for rj in s["replicatedJobs"]]
    if k == "ClusterTrainingRuntime": return [rj["template"]["spec"]["template"] for rj in s["template"]["spec"]["replicatedJobs"]]
    if k == "PyTorchJob": return [r["template"] for r in s["pytorchReplicaSpecs"].values()]
    return []
def resources(o):
    if o["kind"] == "TrainJob": return [o["spec"]["trainer"]["resourcesPerNode"]]
    return [c["resources"] for t in pod_templates(o) for c in t["spec"]["containers"] if "resources" in c]
for path in sorted(glob.glob(os.path.join(sys.argv[1], "k8s_*.yaml"))):
    name = os.path.basename(path)[:-5]
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    it = name.rsplit("_", 1)[1]
    pods = [t for d in docs for t in pod_templates(d)]
    assert pods, f"{name}: no pod template"
    for t in pods:
        spec = t["spec"]
        assert not spec.get("hostIPC"), f"{name}: hostIPC set"
        c = spec["containers"][0]
        assert c["command"] == ["trun"], f"{name}: entrypoint {c['command']}"
        assert "IPC_LOCK" in c["securityContext"]["capabilities"]["add"], f"{name}: no IPC_LOCK"
        shm = [m["name"] for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        vol = [v for v in spec["volumes"] if [v["name"]] == shm]
        assert vol and vol[0]["emptyDir"]["medium"] == "Memory", f"{name}: /dev/shm is not a memory emptyDir"
        if it in want:
            assert spec["nodeSelector"]["node.kubernetes.io/instance-type"] == want[it][0], f"{name}: nodeSelector"
    res = [r for d in docs for r in resources(d)]
    assert res, f"{name}: no resources"
    for r in res:
        for kind in ("limits", "requests"):
            gpu, efa = r[kind]["nvidia.com/gpu"], r[kind]["vpc.amazonaws.com/efa"]
            if it in want:
                assert (gpu, efa) == want[it][1:], f"{name}: {kind} gpu {gpu} efa {efa}, want {want[it][1:]}"
    for d in docs:
        if d["kind"] == "PyTorchJob":
            assert d["spec"]["nprocPerNode"] == str(res[0]["limits"]["nvidia.com/gpu"]), f"{name}: nprocPerNode"
    print(f"ok: {name}: {len(pods)} pod template(s), {len(res)} resource block(s)")
EOF
echo PASS
