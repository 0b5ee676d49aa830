"""A minimal SGLang-like server for the detection benchmarks (stdlib only).

It answers ``GET /health`` with 200 at once, logs like SGLang, writes the ready line after
``--ready-after`` seconds and then ends after ``--crash-after`` more seconds in one of two ways:
``--end oom`` (the incident: an OOM traceback, then exit 1) or ``--end sigkill`` (a silent
SIGKILL, no last words). Right before the ready line and right before the end it writes the
wall-clock time to ``<stamp-dir>/ready`` and ``<stamp-dir>/end`` (atomically), so the
benchmark knows exactly when the event happened.
"""

import argparse
import http.server
import os
import signal
import sys
import threading
import time


def log(msg):
    sys.stdout.write(time.strftime("[%Y-%m-%d %H:%M:%S] ") + msg + "\n")
    sys.stdout.flush()


def stamp(d, name):
    tmp = os.path.join(d, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(repr(time.time()))
    os.rename(tmp, os.path.join(d, name))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--stamp-dir", required=True)
    ap.add_argument("--ready-after", type=float, default=1.0)
    ap.add_argument("--crash-after", type=float, default=0.5)
    ap.add_argument("--end", choices=("oom", "sigkill"), default="oom")
    a = ap.parse_args()

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    log("Load weight begin. avail mem=94.50 GB")
    log("Uvicorn running on http://127.0.0.1:%d (Press CTRL+C to quit)" % a.port)
    time.sleep(min(a.ready_after, 30))
    stamp(a.stamp_dir, "ready")
    log("The server is fired up and ready to roll!")
    time.sleep(min(a.crash_after, 30))
    if a.end == "sigkill":
        stamp(a.stamp_dir, "end")
        os.kill(os.getpid(), signal.SIGKILL)
    stamp(a.stamp_dir, "end")
    sys.stdout.write("Traceback (most recent call last):\n  File \"scheduler.py\", line 1, in init_memory_pool\n"
                     "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n")
    sys.stdout.flush()
    os._exit(1)


if __name__ == "__main__":
    main()
