#!/usr/bin/env bash
# Installs what tests/integration/76-k8s-manifests.sh needs, only where missing:
#   node + npm (Debian's nodejs/npm when no node is on PATH), kubectl for `kubectl kustomize` (the image's,
#   or Debian's kubernetes-client when none: its kustomize is too old for the overlays' `patches:`, the test
#   then skips and says so), and in $TRUN_NPM_DIR (default /var/cache/trun/npm) the npm packages
#   kubernetes-models (ajv validators compiled from the Kubernetes OpenAPI schemas) and yaml; Debian's
#   python3-kubernetes for /usr/bin/python3 (its models drive the unknown-field check, tests/tools/k8s_fields.py).
# Exit codes: 0 ok, 1 an install step failed.
set -euo pipefail
dir=${TRUN_NPM_DIR:-/var/cache/trun/npm}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
need=()
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
command -v kubectl >/dev/null || need+=(kubernetes-client)
/usr/bin/python3 -c 'import kubernetes.client.models' 2>/dev/null || need+=(python3-kubernetes)
if [ ${#need[@]} -gt 0 ]; then
  echo "deps-k8s: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq || { echo "deps-k8s: apt-get update failed; check apt sources" >&2; exit 1; }
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
    { echo "deps-k8s: apt-get install ${need[*]} failed" >&2; exit 1; }
fi
if [ ! -f "$dir/node_modules/kubernetes-models/package.json" ] || [ ! -f "$dir/node_modules/yaml/package.json" ]; then
  echo "deps-k8s: npm install kubernetes-models yaml into $dir"
  $SUDO mkdir -p "$dir"
  $SUDO npm install --prefix "$dir" --no-audit --no-fund --loglevel=error kubernetes-models@5.1.0 yaml@2 ||
    { echo "deps-k8s: npm install kubernetes-models@5.1.0 yaml@2 into $dir failed (npm registry reachable?)" >&2; exit 1; }
fi
exit 0
