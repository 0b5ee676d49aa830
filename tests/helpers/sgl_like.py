"""A small SGLang-like test server (stdlib): real log lines, a real port, /health 503 then 200.

Modes (--mode): ready (default), oom (the incident: dies ~2 s in with "Not enough memory"),
ignore_term (survives SIGTERM), escape_worker (a worker in its own session that outlives the
launcher), bad_flags (argparse-style exit 2). Every sleep is bounded.
"""

import argparse
import http.server
import os
import signal
import sys
import threading
import time


def log(msg):
    print(time.strftime("[%Y-%m-%d %H:%M:%S] ") + msg, flush=True)


def main():
    ap = argparse.ArgumentParser(prog="sglang serve")
    ap.add_argument("--model-path", default="/models/test")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--mode", default="ready")
    ap.add_argument("--delay", type=float, default=0.5)
    ap.add_argument("--warmup", type=float, default=0.3)
    ap.add_argument("--lifetime", type=float, default=120.0)
    ap.add_argument("--echo-argv", default=None)
    args, unknown = ap.parse_known_args()
    if args.echo_argv:
        import json
        with open(args.echo_argv, "w") as f:
            json.dump(sys.argv, f)
    if args.mode == "bad_flags" or unknown:
        ap.error("unrecognized arguments: " + " ".join(unknown or ["--bogus"]))
    if args.mode == "ignore_term":
        signal.signal(signal.SIGTERM, lambda *a: log("SIGTERM ignored"))
    log("Attention backend not specified. Use flashinfer backend by default.")
    log("Load weight begin. avail mem=94.50 GB")
    if args.mode == "oom":
        time.sleep(min(args.delay, 5))
        print("Traceback (most recent call last):\n  File \"scheduler.py\", line 1, in init_memory_pool\n"
              "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", flush=True)
        log("Received sigquit from a child process. It usually means the child failed.")
        sys.exit(1)
    if args.mode == "escape_worker":
        pid = os.fork()
        if pid == 0:
            os.setsid()
            sys.stdout = open(os.devnull, "w")
            t_end = time.time() + args.lifetime
            while time.time() < t_end:
                time.sleep(0.2)
            os._exit(0)
    time.sleep(min(args.delay, 10))
    log("Load weight end. elapsed=0.50 s, type=TestModel, avail mem=40.00 GB, mem usage=54.50 GB.")
    state = {"ready": False}

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            code = 200 if state["ready"] else 503
            self.send_response(code)
            self.end_headers()
            self.wfile.write(b"ok" if code == 200 else b"warming up")

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer((args.host, args.port), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    log("Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (args.host, args.port))
    time.sleep(min(args.warmup, 10))
    state["ready"] = True
    log("The server is fired up and ready to roll!")
    t_end = time.time() + args.lifetime
    n = 0
    while time.time() < t_end:
        time.sleep(0.5)
        n += 1
        if n % 4 == 0:
            log("Decode batch, #running-req: 1, #token: 100, token usage: 0.01, cuda graph: True, "
                "gen throughput (token/s): 27.00, #queue-req: 0")


if __name__ == "__main__":
    main()
