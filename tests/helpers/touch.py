"""Worker that proves it ran: creates OUT_DIR/ran.<LOCAL_RANK> holding its argv[2:] and RANK/WORLD_SIZE.
argv: OUT_DIR [args...]"""
import json
import os
import sys

with open(os.path.join(sys.argv[1], "ran.%s" % os.environ.get("LOCAL_RANK", "none")), "w") as f:
    json.dump({"argv": sys.argv[2:], "RANK": os.environ.get("RANK"), "WORLD_SIZE": os.environ.get("WORLD_SIZE"),
               "LOCAL_WORLD_SIZE": os.environ.get("LOCAL_WORLD_SIZE")}, f)
