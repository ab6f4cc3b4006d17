#!/usr/bin/env bash
# `make demo`: a 2-worker gloo all-reduce through trun --standalone. The workers' Python is trun's own
# rule, the one the README's commands use ($PYTHON_EXEC, else trun's venv / conda Python, else the first
# python3 on PATH), read from --dry-run; a Python without torch is named with the way out.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=(build/trun --standalone --nproc-per-node 2 examples/allreduce.py)
interp=$("${cmd[0]}" --dry-run "${cmd[@]:1}" | sed -n 's/^interpreter: //p')
py=${interp%% (*}
if [ -z "$py" ] || ! "$py" -c "import torch" 2>/dev/null; then
  echo "demo: the workers' interpreter ${interp:-(none found)} cannot import torch" >&2
  if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "demo: Debian's torch is in /usr/bin/python3: run 'PYTHON_EXEC=/usr/bin/python3 make demo'" >&2
  else
    echo "demo: run 'make deps' (installs python3-torch), then 'PYTHON_EXEC=/usr/bin/python3 make demo'" >&2
  fi
  exit 1
fi
echo "demo: ${cmd[*]}   (workers' interpreter: $interp)"
exec "${cmd[@]}"
