"""Worker for 41-agent-env-vs-torchrun: writes its whole os.environ as JSON to OUT_DIR/env.<LOCAL_RANK>.json.
argv: OUT_DIR"""
import json
import os
import sys

path = os.path.join(sys.argv[1], "env.%s.json" % os.environ.get("LOCAL_RANK", "none"))
with open(path + ".tmp", "w") as f:
    json.dump(dict(os.environ), f, indent=1, sort_keys=True)
os.rename(path + ".tmp", path)
