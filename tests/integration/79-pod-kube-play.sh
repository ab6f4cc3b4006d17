#!/usr/bin/env bash
# runner: lock=dist
# The k8s/ manifests run: the pod template of the Indexed Job (k8s/indexed-job/base) and of the JobSet
# (k8s/jobset/base), rendered with `kubectl kustomize` (the test-only kubectl of scripts/deps-k8s.sh), made into
# the two Pods their controller would create (tests/tools/k8s_pod.py: name, host name, completion-index
# annotation, the headless Service's DNS names as hostAliases; the image `make image` builds; no GPU or EFA
# resources, 1 worker, 5 steps: said in the log) and run with `podman kube play` (podman + runc as root, one
# pod per address on this test's bridge network; tests/helpers/pod_lib.sh). The manifests' own command, args,
# PET_* environment (PET_NODE_RANK through the annotation's fieldRef), IPC_LOCK and /dev/shm emptyDir are used
# as they are.
#  1. Indexed Job: both pods' trainer containers exit 0 and examples/train_ddp.py trained in a world of 2
#     (static rendezvous at trun-train-0.trun-train:29500), the replicas in sync; trun is PID 1 of each.
#  2. JobSet: the same with its pod names (trun-train-node-0-<i>) and master trun-train-node-0-0.trun-train.
# Exit: 0 pass, anything else fail.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
. "$TRUN_REPO/tests/helpers/pod_lib.sh"
kubectl=${TRUN_NPM_DIR:-/var/cache/trun/npm}/bin/kubectl
[ -x "$kubectl" ] || fail "no $kubectl: the deps step installs it (run 'make deps': scripts/deps-k8s.sh)"
"$TRUN_HOST_PY" -c 'import yaml' 2>/dev/null || fail "$TRUN_HOST_PY cannot import yaml: the deps step installs python3-yaml (run 'make deps')"
pod_setup 79
pod_build

# run_kind DIR POD_PREFIX SUBDOMAIN: renders k8s/DIR/base, plays pods 0 and 1 at .20 and .21, checks the run.
run_kind() {
  local dir=$1 prefix=$2 sub=$3 i rc
  local ips=("$pod_prefix.20" "$pod_prefix.21")
  "$kubectl" kustomize "$TRUN_REPO/k8s/$dir/base" >"$tmp/$dir.yaml" || fail "$dir: kubectl kustomize failed"
  for i in 0 1; do
    "$TRUN_HOST_PY" "$TRUN_REPO/tests/tools/k8s_pod.py" "$i" "$pod_image" "$prefix-0.$sub=${ips[0]}" \
      "$prefix-1.$sub=${ips[1]}" <"$tmp/$dir.yaml" >"$tmp/$dir.pod$i.yaml" || fail "$dir: k8s_pod.py $i failed"
  done
  cat "$tmp/$dir.pod1.yaml"
  local t0; t0=$(now)
  for i in 1 0; do
    podman kube play --network "$pod_net" --ip "${ips[$i]}" "$tmp/$dir.pod$i.yaml" >"$tmp/$dir.play$i.log" 2>&1 ||
      { cat "$tmp/$dir.play$i.log"; fail "$dir: podman kube play of pod $i failed"; }
  done
  for i in 0 1; do
    pod_wait "$prefix-$i-trainer" 300 || { pod_logs "$prefix-0-trainer"; pod_logs "$prefix-1-trainer"; fail "$dir: pod $i still runs after 300 s"; }
  done
  echo "$dir: 2 pods, train_ddp.py 5 steps: $(elapsed "$t0") s from the first kube play to both exits"
  for i in 0 1; do
    pod_logs "$prefix-$i-trainer" | tee "$tmp/$dir.$i.log" | grep -v "^step "
    rc=$(pod_exit "$prefix-$i-trainer")
    [ "$rc" = 0 ] || fail "$dir: pod $i's trainer exited $rc"
  done
  grep -q "DDP: 2 ranks, gloo" "$tmp/$dir.0.log" "$tmp/$dir.1.log" || fail "$dir: no world of 2"
  [ "$(cat "$tmp/$dir".[01].log | grep -c "params checksum")" = 2 ] &&
    [ "$(cat "$tmp/$dir".[01].log | grep "params checksum" | awk '{print $NF}' | sort -u | wc -l)" = 1 ] ||
    fail "$dir: want 2 equal checksums"
  podman pod rm -f -t 0 "$prefix-0" "$prefix-1" >/dev/null || fail "$dir: podman pod rm failed"
}

echo "== 1. the Indexed Job's pods"
run_kind indexed-job trun-train trun-train
echo "ok 1"
echo "== 2. the JobSet's pods"
run_kind jobset trun-train-node-0 trun-train
echo "ok 2"
echo "PASS: the manifests' pod templates train under podman kube play"
