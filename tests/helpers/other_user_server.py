"""A live SGLang-shaped server for another user (stdlib only: it runs under /usr/bin/python3 as uid 65534).

``python other_user_server.py SIM_DIR GPU MIB PORT PIDFILE``: the launcher answers ``GET /health`` with 200 on
127.0.0.1:PORT and starts two children re-executed with SGLang's titles, ``sglang::scheduler`` (holding MIB of
simulated GPU memory on GPU) and ``sglang::detokenizer``; it writes their pids to PIDFILE (JSON) and lives at
most 120 s. Its environment carries whatever session marks the test gives it.
"""

import http.server
import json
import os
import subprocess
import sys
import threading
import time


def child(title, sim_dir, gpu, mib):
    if title.startswith("sglang::scheduler") and sim_dir:
        os.makedirs(os.path.join(sim_dir, "alloc"), exist_ok=True)
        path = os.path.join(sim_dir, "alloc", "%d.json" % os.getpid())
        with open("/proc/self/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        with open(path + ".tmp", "w") as f:
            json.dump({"pid": os.getpid(), "gpu": gpu, "mem_mib": mib, "busy": 0.0, "spec": False,
                       "start_ticks": start, "updated_at": time.time()}, f)
        os.rename(path + ".tmp", path)
    end = time.time() + 120
    while time.time() < end and os.getppid() != 1:
        time.sleep(0.2)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *a):
        pass


def main():
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    sim_dir, gpu, mib, port, pidfile = sys.argv[1:6]
    kids = [subprocess.Popen([title, os.path.abspath(__file__), "--child", title, sim_dir, gpu, mib],
                             executable=sys.executable) for title in ("sglang::scheduler", "sglang::detokenizer")]
    srv = http.server.HTTPServer(("127.0.0.1", int(port)), Health)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    with open(pidfile + ".tmp", "w") as f:
        json.dump({"launcher": os.getpid(), "children": [k.pid for k in kids]}, f)
    os.rename(pidfile + ".tmp", pidfile)
    time.sleep(120)
    for k in kids:
        k.kill()


if __name__ == "__main__":
    main()
