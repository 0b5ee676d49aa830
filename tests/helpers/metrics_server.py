"""A stand-in launcher with a /metrics endpoint, for the agent's metrics tests (stdlib only).

:func:`install` writes a package ``sglang`` whose ``launch_server`` runs this file, so the process
runs as ``python3 -m sglang.launch_server --port PORT --enable-metrics`` (the argv the agent
classifies). It serves ``GET /metrics`` on 127.0.0.1:PORT; ``METRICS_MODE``: ``ok`` a few
real-looking SGLang lines, ``slow`` the same after 3 s, ``huge`` 3 MiB of lines.
"""

from __future__ import annotations

import http.server
import os
import sys
import time


def install(root: str) -> None:
    """Write ``<root>/sglang/launch_server.py`` running this file (put ``root`` on PYTHONPATH)."""
    os.makedirs(os.path.join(root, "sglang"), exist_ok=True)
    with open(os.path.join(root, "sglang", "__init__.py"), "w") as f:
        f.write("")
    with open(os.path.join(root, "sglang", "launch_server.py"), "w") as f:
        f.write("import runpy\nrunpy.run_path(%r, run_name='__main__')\n" % os.path.abspath(__file__))

TEXT = ('# HELP sglang:num_running_reqs The number of running requests.\n'
        '# TYPE sglang:num_running_reqs gauge\n'
        'sglang:num_running_reqs{model_name="tiny"} 3.0\n'
        'sglang:gen_throughput{model_name="tiny"} 1234.5\n')


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        mode = self.server.mode  # type: ignore[attr-defined]
        if self.path != "/metrics":
            self.send_error(404)
            return
        if mode == "slow":
            time.sleep(3)
        body = (TEXT if mode != "huge" else "x" * 1023 + "\n" * 1 + ("y" * 1023 + "\n") * 3 * 1024).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    port, mode = int(sys.argv[sys.argv.index("--port") + 1]), os.environ.get("METRICS_MODE", "ok")
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    srv.mode = mode  # type: ignore[attr-defined]
    print("ready", flush=True)
    srv.serve_forever()
