#!/usr/bin/env bash
# `make demo`: a 2-worker gloo all-reduce through trun --standalone, with Debian's torch.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON_EXEC:-/usr/bin/python3}
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "demo: $py cannot import torch; run 'make deps' (installs python3-torch)" >&2
  exit 1
fi
echo "demo: build/trun --standalone --nproc-per-node 2 examples/allreduce.py   (PYTHON_EXEC=$py)"
PYTHON_EXEC=$py exec build/trun --standalone --nproc-per-node 2 examples/allreduce.py
