#!/usr/bin/env python3
"""A GPU load program that looks like an SGLang server to mtpconsole, for validating on real GPUs.

It holds a chosen amount of GPU memory, runs bf16 matrix products at a chosen duty cycle,
serves ``GET /health`` on 127.0.0.1 (503 while warming up, then 200) and prints log lines in
SGLang's format, so that ``mtpconsole launch`` / ``kill`` / ``status`` can be exercised
against real NVML figures without a model::

    python3 tests/gpu/gpu_load.py --mem-gb 40 --duty 0.8 --port 30000 --lifetime 300
    python3 tests/gpu/gpu_load.py --oom --port 30001      # really exhausts GPU memory

Phases and the lines they print (``[%Y-%m-%d %H:%M:%S] `` prefix):

1. ``Load weight begin. avail mem=X GB`` - allocate ``--mem-gb`` GiB in 1 GiB tensors (written,
   so the memory is resident) plus three ``--matrix`` x ``--matrix`` bf16 matrices -
   ``Load weight end. elapsed=..., type=GpuLoad, dtype=torch.bfloat16, avail mem=X GB, mem usage=Y GB.``
2. With ``--oom``: ``KV Cache allocation begin.``, then 1 GiB blocks until torch raises
   ``torch.OutOfMemoryError: CUDA out of memory...``; the traceback is printed after
   ``Scheduler hit an exception: `` (as SGLang's scheduler does), then exit status 1.
3. ``Uvicorn running on http://127.0.0.1:P (Press CTRL+C to quit)``; /health answers 503 while
   ``--warmup`` seconds of products run, then 200 and ``The server is fired up and ready to roll!``.
4. Serving: every ``--log-interval`` s a ``Decode batch, ... gen throughput (token/s): ...`` line
   (one synthetic "token" per matrix row produced) with the achieved TFLOP/s appended.
5. Ends after ``--lifetime`` s (status 0), or on SIGTERM/SIGINT (status 0, after a log line).

``--no-gpu`` runs every phase without torch (no memory, sleeps instead of products): for CPU-only
tests of the HTTP and log behaviour. Bad arguments are an argparse error (status 2); a missing
torch or CUDA is one clear line (status 3).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GIB = 1 << 30
READY_LINE = "The server is fired up and ready to roll!"
EXIT_NO_CUDA = 3
_LOG_LOCK = threading.Lock()


def log(msg: str, stream=None) -> None:
    """Print one SGLang-style line: ``[YYYY-MM-DD HH:MM:SS] msg``, flushed at once (thread-safe)."""
    stream = stream or sys.stdout
    with _LOG_LOCK:
        stream.write("[%s] %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), msg))
        stream.flush()


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a number between 0 and 1, got %r" % text) from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1, got %s" % text)
    return v


def _non_negative(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a number, got %r" % text) from None
    if v < 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError("must be a finite number >= 0, got %s" % text)
    return v


def _positive(text: str) -> float:
    v = _non_negative(text)
    if v == 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return v


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a port number, got %r" % text) from None
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError("port must be 1..65535, got %d" % v)
    return v


def _matrix(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected an integer, got %r" % text) from None
    if not 64 <= v <= 32768:
        raise argparse.ArgumentTypeError("matrix size must be 64..32768, got %d" % v)
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu_load.py", description="GPU load that looks like an SGLang server.")
    p.add_argument("--mem-gb", type=_non_negative, default=8.0, help="GiB of GPU memory to hold (default 8)")
    p.add_argument("--duty", type=_fraction, default=0.5, help="fraction of time running matmuls, 0..1 (default 0.5)")
    p.add_argument("--port", type=_port, default=30000, help="HTTP port on 127.0.0.1 (default 30000)")
    p.add_argument("--warmup", type=_non_negative, default=3.0, help="seconds /health answers 503 (default 3)")
    p.add_argument("--lifetime", type=_positive, default=300.0, help="seconds before exiting (default 300)")
    p.add_argument("--oom", action="store_true", help="exhaust GPU memory after loading: OutOfMemoryError, exit 1")
    p.add_argument("--matrix", type=_matrix, default=8192, help="matmul size N (N x N bf16, default 8192)")
    p.add_argument("--period", type=_positive, default=0.1, help="duty-cycle period in seconds (default 0.1)")
    p.add_argument("--log-interval", type=_positive, default=5.0, help="seconds between Decode batch lines")
    p.add_argument("--no-gpu", action="store_true", help="no torch: sleep instead of matmuls (CPU-only tests)")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    """Parse and cross-check the arguments (argparse error, status 2, on bad input)."""
    p = build_parser()
    a = p.parse_args(argv)
    if a.period > a.lifetime:
        p.error("--period (%s s) must not exceed --lifetime (%s s)" % (a.period, a.lifetime))
    return a


def duty_split(duty: float, period: float) -> tuple:
    """(busy seconds, idle seconds) of one duty-cycle period."""
    busy = max(0.0, min(1.0, duty)) * period
    return busy, period - busy


def decode_line(tokens_per_s: float, tflops: float, mem_gb: float, duty: float, n_tokens: int) -> str:
    """A ``Decode batch`` line in SGLang's format, with the load's own figures appended."""
    return ("Decode batch, #running-req: 1, #token: %d, token usage: 0.01, cuda graph: True, "
            "gen throughput (token/s): %.2f, #queue-req: 0, achieved TFLOP/s: %.1f, duty: %.2f, held: %.2f GB"
            % (n_tokens, tokens_per_s, tflops, duty, mem_gb))


class State:
    """What the HTTP thread and the main loop share."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.stop_reason = None


def make_handler(state: State):
    class Handler(BaseHTTPRequestHandler):
        server_version = "uvicorn"
        sys_version = ""

        def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                if state.ready.is_set():
                    self._send(200, b"")
                else:
                    self._send(503, b"warming up")
            elif path == "/get_model_info":
                self._send(200, b'{"model_path": "gpu-load", "is_generation": true}', "application/json")
            else:
                self._send(404, b'{"detail":"Not Found"}', "application/json")

        do_HEAD = do_GET

        def log_message(self, fmt, *args) -> None:  # uvicorn's access-log shape
            try:
                code = int(args[1])
            except (IndexError, ValueError):
                code = 0
            phrase = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}.get(code, "")
            log('INFO:     %s:%d - "%s" %s %s' % (self.client_address[0], self.client_address[1],
                                                  args[0] if args else "", code, phrase))

    return Handler


def start_http(state: State, port: int) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", port), make_handler(state))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, name="http", kwargs={"poll_interval": 0.1}, daemon=True).start()
    return srv


class NullBackend:
    """No GPU: every phase runs, nothing is allocated, products are sleeps."""

    flops_per_op = 0.0

    def __init__(self, args) -> None:
        self.args = args

    def avail_gb(self) -> float:
        return 0.0

    def load(self, mem_gb: float) -> float:
        return 0.0

    def exhaust(self) -> None:
        raise MemoryError("--oom needs a GPU (not available with --no-gpu)")

    def run_ops(self, seconds: float) -> int:
        time.sleep(seconds)
        return 0


class TorchBackend:
    """Memory held in 1 GiB uint8 tensors; bf16 N x N products, each synchronised."""

    def __init__(self, args) -> None:
        import torch  # raises ImportError when absent

        self.torch = torch
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available to torch %s (CUDA_VISIBLE_DEVICES=%r)" % (
                torch.__version__, os.environ.get("CUDA_VISIBLE_DEVICES")))
        self.dev = torch.device("cuda", 0)
        torch.cuda.set_device(self.dev)
        self.blocks = []
        n = args.matrix
        self.flops_per_op = 2.0 * n * n * n
        self.a = torch.randn(n, n, device=self.dev, dtype=torch.bfloat16)
        self.b = torch.randn(n, n, device=self.dev, dtype=torch.bfloat16)
        self.c = torch.empty(n, n, device=self.dev, dtype=torch.bfloat16)

    def avail_gb(self) -> float:
        free, _total = self.torch.cuda.mem_get_info(self.dev)
        return free / GIB

    def _block(self, nbytes: int):
        t = self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.dev)
        t.fill_(1)  # touch it: resident, not just reserved
        self.blocks.append(t)

    def load(self, mem_gb: float) -> float:
        left = int(mem_gb * GIB)
        while left > 0:
            step = min(GIB, left)
            self._block(step)
            left -= step
        self.torch.cuda.synchronize(self.dev)
        return self.torch.cuda.memory_allocated(self.dev) / GIB

    def exhaust(self) -> None:
        """Allocate 1 GiB blocks until the caching allocator raises torch.OutOfMemoryError."""
        for _ in range(100000):  # bounded: far more GiB than any GPU has
            self._block(GIB)
        raise RuntimeError("allocated 100000 GiB without running out of memory")

    def run_ops(self, seconds: float) -> int:
        torch, n = self.torch, 0
        end = time.perf_counter() + seconds
        while True:
            torch.mm(self.a, self.b, out=self.c)
            torch.cuda.synchronize(self.dev)
            n += 1
            if time.perf_counter() >= end:
                return n


def open_backend(args):
    if args.no_gpu:
        return NullBackend(args)
    try:
        return TorchBackend(args)
    except ImportError as e:
        log("GPU load cannot start: torch is not importable (%s); use --no-gpu for a CPU-only run" % e,
            sys.stderr)
    except RuntimeError as e:
        log("GPU load cannot start: %s" % e, sys.stderr)
    sys.exit(EXIT_NO_CUDA)


def serve(args, state: State, backend) -> int:
    """Warm up, announce readiness, then run the duty cycle until the lifetime or a signal."""
    t_end = time.monotonic() + args.lifetime
    warm_end = time.monotonic() + args.warmup
    while time.monotonic() < warm_end and not state.stop.is_set():
        backend.run_ops(min(0.2, max(0.0, warm_end - time.monotonic())))
    if state.stop.is_set():
        return 0
    state.ready.set()
    log(READY_LINE)
    busy_s, idle_s = duty_split(args.duty, args.period)
    ops = busy = 0.0
    tokens_total = 0
    window = time.monotonic()
    next_log = window + args.log_interval
    while not state.stop.is_set():
        now = time.monotonic()
        if now >= t_end:
            state.stop_reason = "lifetime of %.0f s reached" % args.lifetime
            break
        if busy_s > 0:
            t0 = time.perf_counter()
            ops += backend.run_ops(busy_s)
            busy += time.perf_counter() - t0
        if idle_s > 0:
            state.stop.wait(min(idle_s, max(0.0, t_end - time.monotonic())))
        now = time.monotonic()
        if now >= next_log:
            span = max(1e-9, now - window)
            tokens = int(ops * args.matrix)
            tokens_total += tokens
            log(decode_line(tokens / span, ops * backend.flops_per_op / span / 1e12, args.held_gb,
                            busy / span, tokens_total))
            ops = busy = 0.0
            window, next_log = now, now + args.log_interval
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    state = State()

    def on_signal(signum, _frame):
        state.stop_reason = "received %s" % signal.Signals(signum).name
        state.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log("gpu_load pid=%d args=%s CUDA_VISIBLE_DEVICES=%s" % (
        os.getpid(), " ".join(sys.argv[1:] if argv is None else argv), os.environ.get("CUDA_VISIBLE_DEVICES")))
    backend = open_backend(args)
    t0 = time.monotonic()
    log("Load weight begin. avail mem=%.2f GB" % backend.avail_gb())
    try:
        args.held_gb = backend.load(args.mem_gb)
        log("Load weight end. elapsed=%.2f s, type=GpuLoad, dtype=torch.bfloat16, avail mem=%.2f GB, "
            "mem usage=%.2f GB." % (time.monotonic() - t0, backend.avail_gb(), args.held_gb))
        if args.oom:
            log("KV Cache allocation begin. avail mem=%.2f GB" % backend.avail_gb())
            backend.exhaust()
    except Exception as e:  # torch.OutOfMemoryError among them: log it the way SGLang's scheduler does
        log("Scheduler hit an exception: %s" % traceback.format_exc().rstrip())
        log("Received sigquit from a child process. It usually means the child failed.")
        del e
        return 1
    try:
        srv = start_http(state, args.port)
    except OSError as e:
        log("ERROR:    [Errno %s] error while attempting to bind on address ('127.0.0.1', %d): %s" % (
            e.errno, args.port, e.strerror))
        return 1
    log("INFO:     Uvicorn running on http://127.0.0.1:%d (Press CTRL+C to quit)" % args.port)
    try:
        rc = serve(args, state, backend)
    finally:
        srv.shutdown()
        srv.server_close()
    log("Shutting down: %s." % (state.stop_reason or "stopped"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
