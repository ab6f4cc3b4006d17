#!/usr/bin/env bash
# `make demo`: a 2-worker gloo all-reduce through trun --standalone. The workers' Python is trun's own
# rule, the one the README's commands use ($PYTHON_EXEC, else trun's venv / conda Python, else the first
# python3 on PATH), read from --dry-run. Where that Python has no torch but Debian's (from `make deps`) has,
# the demo says so and runs with PYTHON_EXEC=/usr/bin/python3, as a user would; else it names the way out.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=(build/trun --standalone --nproc-per-node 2 examples/allreduce.py)
interp=$("${cmd[0]}" --dry-run "${cmd[@]:1}" | sed -n 's/^interpreter: //p')
py=${interp%% (*}
if [ -z "$py" ] || ! "$py" -c "import torch" 2>/dev/null; then
  echo "demo: the workers' interpreter ${interp:-(none found)} cannot import torch" >&2
  if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "demo: run 'make deps' (installs python3-torch), then 'PYTHON_EXEC=/usr/bin/python3 make demo'" >&2
    exit 1
  fi
  echo "demo: Debian's torch is in /usr/bin/python3: this demo sets PYTHON_EXEC=/usr/bin/python3 (do the same" \
    "for your own commands, or install torch for $py)" >&2
  export PYTHON_EXEC=/usr/bin/python3
  interp=$("${cmd[0]}" --dry-run "${cmd[@]:1}" | sed -n 's/^interpreter: //p')
fi
echo "demo: ${cmd[*]}   (workers' interpreter: $interp)"
exec "${cmd[@]}"
