"""A stand-in server that records exactly what it received (argv, selected env) and then idles.

Writes JSON {"argv": [...], "env": {...}} to $REL_ECHO_OUT, prints one line, sleeps up to 30 s
(SIGTERM ends it at once). Stdlib only.
"""

import json
import os
import sys
import time

out = os.environ.get("REL_ECHO_OUT")
if out:
    with open(out, "w") as f:
        json.dump({"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k.startswith("EVIL")
                                                 or k in ("HF_TOKEN",)}}, f)
print("rel_echo started", flush=True)
t_end = time.time() + 30
while time.time() < t_end:
    time.sleep(0.1)
