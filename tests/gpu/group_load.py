#!/usr/bin/env python3
"""A two-GPU (or N-GPU) group load that looks like a multi-node SGLang server to mtpconsole (issue 32).

Every member runs the same command with its own ``--node-rank``, one GPU each (``CUDA_VISIBLE_DEVICES``
picks it), as ``mtpconsole launch --host node0 --host node1 --nnodes 2`` starts them::

    python3 tests/gpu/group_load.py --nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:29500 --port 30000
    python3 tests/gpu/group_load.py --nnodes 2 --node-rank 1 --dist-init-addr 127.0.0.1:29500 --port 30001

GPU mode: a real ``torch.distributed`` NCCL process group (``init_process_group("nccl",
init_method="tcp://ADDR")``, rank 0 hosts the store there), ``--mem-gb`` GiB held on the member's
GPU (``tests/gpu/gpu_load.py``'s ``TorchBackend``), and every step ``--duty`` x ``--period`` s of bf16
products then one all-reduce of ``--allreduce-mb`` MiB over NCCL. NVLink multicast stays off
(``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, ``NVSHMEM_DISABLE_NVLS=1`` are forced:
a program that uses it can take a shared host's GPUs out of service); with a loopback dist-init
address ``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME`` default to ``lo`` (one host, two "nodes").

``--no-gpu`` (CPU tests): torch is never imported; rank 0 listens at the dist-init address, the other
ranks connect (retrying, as torch's store client does), and each step is a heartbeat "all-reduce"
over those TCP connections (every rank sends its vector to rank 0, which answers the sum).

Both modes behave alike:

- ``[ts TPr] Init torch distributed begin.`` then, once every rank joined, ``... ends.``,
  ``Load weight begin/end ... mem usage=X GB.``; ``--warmup`` s of steps; then rank 0 prints
  ``The server is fired up and ready to roll!`` and every ``--log-interval`` s a ``Decode batch, ...``
  line (one token per step, the all-reduce's latency appended). Ranks >= 1 print no Decode lines.
- Rank 0 serves HTTP on ``--host``:``--port`` from the start: ``/health`` answers 503 while the
  group joins and warms up, then 200; ``POST /generate`` answers once ``max_new_tokens`` steps
  completed (it hangs with the group); ``/health_generate`` is a one-step generate with SGLang's
  20 s bound (503 when the group is hung). Ranks >= 1 serve SGLang's dummy health server on their
  own ``--port`` once joined (200 whatever happens, ``console.sim.sglang_group``).
- A dead peer: the survivors HANG in their next collective (as NCCL does: no error, no line, memory
  kept) while rank 0 keeps answering ``/health`` 200. Only ``--lifetime``, SIGKILL, or (rank 0)
  SIGTERM end a hung member.
- Stopping: rank 0's SIGTERM/SIGINT puts a stop flag into the next all-reduce, so the whole group
  ends together (status 0; a hung rank 0 exits on its own after 2 s). Ranks >= 1 only log SGLang's
  ``SIGTERM received on node_rank R; waiting for the rank-0 ShutdownReq broadcast ...`` and go on.
  ``--lifetime`` ends each member (status 0), hung or not.

Bad arguments are an argparse error (status 2); a missing torch, CUDA or NCCL in GPU mode is one
clear line (status 3); a dist-init address or port already taken, or an exception in the step loop
(``Scheduler hit an exception: ...``), status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from http.server import ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
for _p in (HERE, REPO):  # gpu_load.py beside this file; console/ for SGLang's dummy health server
    if _p not in sys.path:
        sys.path.insert(0, _p)

import gpu_load as gl  # noqa: E402

from console.sim.sglang_group import (  # noqa: E402
    CONNECT_RETRY_S,
    CONNECT_WARN_EVERY,
    connect_failed_line,
    dummy_health_server,
    split_addr,
)

FORCED_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""Set whatever the environment says: NVLink multicast off (see the module doc)."""
LOOPBACK_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
"""Defaulted to ``lo`` when the dist-init host is a loopback address (the members share one host)."""
STOP_GRACE_S = 2.0
"""After a stop (signal or lifetime), how long the step loop gets to end the group cleanly before the process
exits on its own (a hung collective never returns)."""
HEALTH_GENERATE_S = 20.0
"""SGLang's /health_generate bound: no step within it and the answer is 503."""
GENERATE_MAX_S = 600.0
"""A /generate waits for its steps at most this long (a hung group: the client gives up first)."""
SHUTDOWN_REQ_LINE = ("SIGTERM received on node_rank %d; waiting for the rank-0 ShutdownReq broadcast to stop the "
                     "schedulers.")


# ------------------------------------------------------------------ arguments

def _int_in(lo: int, hi: int, what: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError("expected an integer, got %r" % text) from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError("%s must be %d..%d, got %d" % (what, lo, hi, v))
        return v
    return parse


def _addr(text: str) -> tuple:
    try:
        return split_addr(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="group_load.py",
                                description="A multi-node group load that looks like an SGLang server.")
    p.add_argument("--nnodes", type=_int_in(1, 64, "--nnodes"), default=1, help="members in the group (default 1)")
    p.add_argument("--node-rank", type=_int_in(0, 63, "--node-rank"), default=0, help="this member's rank")
    p.add_argument("--dist-init-addr", type=_addr, default=None, metavar="HOST:PORT",
                   help="where rank 0 hosts the rendezvous (required with --nnodes > 1)")
    p.add_argument("--tp-size", "--tensor-parallel-size", type=_int_in(1, 512, "--tp-size"), default=None,
                   help="tensor-parallel size over the whole group (default --nnodes: one GPU a member)")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address (rank 0) / dummy health address (default "
                   "127.0.0.1)")
    p.add_argument("--port", type=gl._port, default=30000, help="HTTP port (rank 0) or dummy health port (default "
                   "30000)")
    p.add_argument("--mem-gb", type=gl._non_negative, default=8.0, help="GiB of GPU memory to hold (default 8)")
    p.add_argument("--duty", type=gl._fraction, default=0.3, help="fraction of each step running matmuls "
                   "(default 0.3)")
    p.add_argument("--matrix", type=gl._matrix, default=4096, help="matmul size N (default 4096)")
    p.add_argument("--period", type=gl._positive, default=0.1, help="seconds per step, the all-reduce included "
                   "(default 0.1)")
    p.add_argument("--allreduce-mb", type=gl._non_negative, default=16.0,
                   help="MiB all-reduced every step over NCCL (default 16; --no-gpu sends a few numbers)")
    p.add_argument("--warmup", type=gl._non_negative, default=2.0, help="seconds of steps before ready "
                   "(default 2)")
    p.add_argument("--lifetime", type=gl._positive, default=300.0, help="seconds before exiting, hung or not "
                   "(default 300)")
    p.add_argument("--log-interval", type=gl._positive, default=5.0, help="seconds between Decode batch lines")
    p.add_argument("--dist-timeout", type=gl._positive, default=None,
                   help="torch's process-group timeout in seconds (default: --lifetime + 600, so that torch's "
                   "watchdog never ends a hung member before its lifetime)")
    p.add_argument("--no-gpu", action="store_true", help="no torch: TCP rendezvous and heartbeat (CPU tests)")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    """Parse and cross-check (argparse error, status 2, on bad input)."""
    p = build_parser()
    a = p.parse_args(argv)
    if a.node_rank >= a.nnodes:
        p.error("--node-rank %d is outside 0..%d (--nnodes %d)" % (a.node_rank, a.nnodes - 1, a.nnodes))
    if a.nnodes > 1 and a.dist_init_addr is None:
        p.error("--dist-init-addr HOST:PORT is required with --nnodes %d" % a.nnodes)
    if a.tp_size is None:
        a.tp_size = a.nnodes
    if a.tp_size % a.nnodes:
        p.error("--tp-size %d must be divisible by --nnodes %d" % (a.tp_size, a.nnodes))
    if a.tp_size != a.nnodes and not a.no_gpu:
        p.error("--tp-size %d over %d node(s): this load runs one GPU a member (--tp-size %d)"
                % (a.tp_size, a.nnodes, a.nnodes))
    if a.period > a.lifetime:
        p.error("--period (%s s) must not exceed --lifetime (%s s)" % (a.period, a.lifetime))
    if a.dist_timeout is None:
        a.dist_timeout = a.lifetime + 600.0
    return a


def group_env(args, environ=None) -> dict:
    """The variables this member sets before torch/NCCL start (the forced ones, and the loopback defaults)."""
    environ = os.environ if environ is None else environ
    out = dict(FORCED_ENV)
    host = args.dist_init_addr[0] if args.dist_init_addr else "127.0.0.1"
    if host in ("localhost", "::1") or host.startswith("127."):
        for k in LOOPBACK_ENV:
            if not environ.get(k):
                out[k] = "lo"
    return out


def log_tp(rank: int, msg: str) -> None:
    """A scheduler's line: ``[YYYY-MM-DD HH:MM:SS TPr] msg`` (SGLang's prefix when tp > 1)."""
    with gl._LOG_LOCK:
        sys.stdout.write("[%s TP%d] %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), rank, msg))
        sys.stdout.flush()


# ------------------------------------------------------------------ the collectives

class TcpCollective:
    """``--no-gpu``: the group over TCP. Rank 0 listens at the dist-init address; each step every rank sends its
    vector (one JSON line) and rank 0 answers the sum. A peer's EOF is never reported: the collective blocks, as
    an NCCL all-reduce with a dead peer does."""

    def __init__(self, args) -> None:
        self.nnodes, self.rank, self.addr = args.nnodes, args.node_rank, args.dist_init_addr
        self.server = None
        self.peers: dict = {}  # rank -> (socket, reader)
        self.hung_since = None
        self._forever = threading.Event()

    def bind(self) -> None:
        if self.rank == 0 and self.nnodes > 1:
            self.server = socket.create_server(self.addr, backlog=max(8, self.nnodes))
            self.server.settimeout(0.2)

    def block(self) -> None:
        """A collective that never completes (the process ends around it: lifetime, signal, SIGKILL)."""
        if self.hung_since is None:
            self.hung_since = time.time()
        self._forever.wait()

    def join(self, quit_: threading.Event) -> bool:
        if self.nnodes == 1:
            return True
        return self._head(quit_) if self.rank == 0 else self._member(quit_)

    def _head(self, quit_: threading.Event) -> bool:
        while len(self.peers) < self.nnodes - 1:
            if quit_.is_set():
                return False
            try:
                conn, _ = self.server.accept()
            except socket.timeout:
                continue
            except OSError:
                return False
            conn.settimeout(10.0)
            reader = conn.makefile("rb")
            try:
                hello = json.loads(reader.readline(4096) or b"{}")
                rank, nn = int(hello.get("rank", -1)), int(hello.get("nnodes", -1))
            except (OSError, ValueError, TypeError, AttributeError):
                conn.close()
                continue
            if nn != self.nnodes or not 0 < rank < self.nnodes or rank in self.peers:
                gl.log("[W] rendezvous: refused a member saying rank %s of %s (this group: %d nodes, joined %s)"
                       % (rank, nn, self.nnodes, sorted(self.peers)))
                conn.close()
                continue
            conn.settimeout(None)
            self.peers[rank] = (conn, reader)
        for conn, _ in self.peers.values():
            conn.sendall(b'{"go": true}\n')
        return True

    def _member(self, quit_: threading.Event) -> bool:
        tries = 0
        while not quit_.is_set():
            try:
                conn = socket.create_connection(self.addr, timeout=5.0)
            except OSError as e:
                tries += 1
                if tries % CONNECT_WARN_EVERY == 1:
                    gl.log(connect_failed_line(self.addr, e))
                quit_.wait(CONNECT_RETRY_S)
                continue
            reader = conn.makefile("rb")
            try:
                conn.sendall((json.dumps({"rank": self.rank, "nnodes": self.nnodes}) + "\n").encode())
                conn.settimeout(None)
                go = json.loads(reader.readline(4096) or b"{}")
            except (OSError, ValueError):
                go = {}
            if isinstance(go, dict) and go.get("go"):
                self.peers[0] = (conn, reader)
                return True
            conn.close()  # refused or rank 0 went away before the group formed: try again
            quit_.wait(CONNECT_RETRY_S)
        return False

    def _read(self, reader) -> list:
        try:
            line = reader.readline(1 << 16)
            vec = json.loads(line)["v"] if line else None
        except (OSError, ValueError, KeyError, TypeError):
            vec = None
        if vec is None:
            self.block()
        return [float(x) for x in vec]

    def _send(self, conn, vec: list) -> None:
        try:
            conn.sendall((json.dumps({"v": vec}) + "\n").encode())
        except OSError:
            self.block()

    def all_reduce(self, vec: list) -> list:
        if self.nnodes == 1:
            return list(vec)
        if self.rank == 0:
            total = list(vec)
            for r in sorted(self.peers):
                got = self._read(self.peers[r][1])
                total = [a + b for a, b in zip(total, got)]
            for r in sorted(self.peers):
                self._send(self.peers[r][0], total)
            return total
        conn, reader = self.peers[0]
        self._send(conn, vec)
        return self._read(reader)

    def close(self) -> None:
        for conn, _ in self.peers.values():
            try:
                conn.close()
            except OSError:
                pass
        if self.server is not None:
            self.server.close()


class TorchCollective:
    """GPU mode: a torch.distributed NCCL process group; each step one all-reduce of ``--allreduce-mb`` MiB whose
    first elements carry the step's vector. The wait polls the work (so signals and the HTTP thread keep running)
    and never gives up: a dead peer leaves it waiting, as NCCL does."""

    def __init__(self, args, backend) -> None:
        import torch  # the backend already imported it (status 3 when absent)
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_nccl_available():
            raise RuntimeError("torch %s has no NCCL backend (torch.distributed.is_nccl_available() is False)"
                               % torch.__version__)
        self.torch, self.dist, self.args = torch, dist, args
        self.dev = backend.dev
        self.nnodes, self.rank = args.nnodes, args.node_rank
        self.numel = max(8, int(args.allreduce_mb * (1 << 20)) // 4)
        self.buf = None
        self.hung_since = None

    def bind(self) -> None:  # torch's TCPStore binds inside init_process_group
        pass

    def join(self, quit_: threading.Event) -> bool:
        import datetime

        torch, dist, a = self.torch, self.dist, self.args
        host, port = a.dist_init_addr or ("127.0.0.1", 29500)
        kw = dict(backend="nccl", init_method="tcp://%s:%d" % (("[%s]" % host) if ":" in host else host, port),
                  world_size=self.nnodes, rank=self.rank, timeout=datetime.timedelta(seconds=a.dist_timeout))
        try:
            dist.init_process_group(device_id=self.dev, **kw)  # eager NCCL init: blocks until every rank is in
        except TypeError:  # an older torch without device_id
            dist.init_process_group(**kw)
        self.buf = torch.ones(self.numel, dtype=torch.float32, device=self.dev)
        got = self.all_reduce([1.0])  # the group is complete once one collective went round
        return not quit_.is_set() and round(got[0]) == self.nnodes

    def all_reduce(self, vec: list) -> list:
        torch = self.torch
        self.buf.fill_(1.0)
        self.buf[:len(vec)] = torch.tensor(vec, dtype=torch.float32, device=self.dev)
        work = self.dist.all_reduce(self.buf, async_op=True)
        t0 = time.monotonic()
        while not work.is_completed():  # a dead peer: this never ends (the process ends around it)
            if self.hung_since is None and time.monotonic() - t0 > 1.0:
                self.hung_since = time.time() - 1.0
            time.sleep(0.0005)
        return self.buf[:len(vec)].tolist()

    def close(self) -> None:
        try:
            self.dist.destroy_process_group()
        except Exception:  # best effort at exit
            pass


# ------------------------------------------------------------------ shared state and HTTP

class GroupState(gl.State):
    """What the HTTP threads, the step loop and the main thread share."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "joining the group"
        self.steps = 0
        self.cond = threading.Condition()
        self.want_stop = threading.Event()  # put a stop flag into the next collective
        self.quit = threading.Event()  # the step loop should give up (joining or not)
        self.done = threading.Event()  # the step loop ended (cleanly or by an exception)
        self.failed = None

    def step_done(self) -> None:
        with self.cond:
            self.steps += 1
            self.cond.notify_all()

    def wait_steps(self, n: int, timeout: float) -> bool:
        """True once ``n`` more steps completed, False after ``timeout`` s (a hung group)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            want = self.steps + n
            while self.steps < want:
                left = deadline - time.monotonic()
                if left <= 0 or self.quit.is_set():
                    return False
                self.cond.wait(min(left, 0.5))
        return True


def make_handler(state: GroupState):
    base = gl.make_handler(state)

    class Handler(base):  # type: ignore[misc, valid-type]
        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            if path == "/health" and not state.ready.is_set():
                self._send(503, state.phase.encode())
            elif path == "/health_generate":
                ok = state.ready.is_set() and state.wait_steps(1, HEALTH_GENERATE_S)
                self._send(200 if ok else 503, b"" if ok else state.phase.encode())
            else:
                super().do_GET()

        do_HEAD = do_GET

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            try:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(min(max(n, 0), 1 << 20)) or b"{}")
            except (ValueError, OSError):
                self._send(400, b'{"error": "bad JSON body"}', "application/json")
                return
            if path != "/generate":
                self._send(404, b'{"detail":"Not Found"}', "application/json")
                return
            if not state.ready.is_set():
                self._send(503, json.dumps({"error": state.phase}).encode(), "application/json")
                return
            sp = body.get("sampling_params") if isinstance(body, dict) else None
            try:
                k = max(1, min(64, int((sp or {}).get("max_new_tokens", 1))))
            except (TypeError, ValueError):
                k = 1
            t0 = time.monotonic()
            if not state.wait_steps(k, GENERATE_MAX_S):
                self._send(503, b'{"error": "the step loop did not advance"}', "application/json")
                return
            out = {"text": " ok" * k, "meta_info": {
                "prompt_tokens": len(str(body.get("text", "")).split()), "completion_tokens": k,
                "finish_reason": {"type": "length", "length": k}, "e2e_latency": round(time.monotonic() - t0, 4)}}
            self._send(200, json.dumps(out).encode(), "application/json")

    return Handler


def start_http(state: GroupState, host: str, port: int) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer((host, port), make_handler(state))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, name="http", kwargs={"poll_interval": 0.1}, daemon=True).start()
    return srv


# ------------------------------------------------------------------ the step loop (SGLang's scheduler)

def scheduler(args, state: GroupState, backend, coll) -> None:
    """Join, load, warm up, serve: one collective a step. Runs on its own thread; may block forever."""
    r = args.node_rank
    try:
        log_tp(r, "Init torch distributed begin.")
        t0 = time.monotonic()
        if not coll.join(state.quit):
            return
        log_tp(r, "Init torch distributed ends. elapsed=%.2f s, mem usage=%.2f GB"
               % (time.monotonic() - t0, 0.0))
        state.phase = "loading"
        log_tp(r, "Load weight begin. avail mem=%.2f GB" % backend.avail_gb())
        t1 = time.monotonic()
        held = backend.load(args.mem_gb)
        log_tp(r, "Load weight end. elapsed=%.2f s, type=GroupLoad, dtype=torch.bfloat16, avail mem=%.2f GB, "
               "mem usage=%.2f GB." % (time.monotonic() - t1, backend.avail_gb(), held))
        state.phase = "warming up"
        serve_steps(args, state, backend, coll, held)
    except Exception:
        state.failed = traceback.format_exc().rstrip()
        log_tp(r, "Scheduler hit an exception: %s" % state.failed)
    finally:
        state.done.set()


def serve_steps(args, state: GroupState, backend, coll, held: float) -> None:
    r = args.node_rank
    busy_s, idle_s = gl.duty_split(args.duty, args.period)
    ready_at = time.monotonic() + args.warmup
    window = time.monotonic()
    next_log = None
    ops = busy = ar = 0.0
    n = total = 0
    while True:
        if busy_s > 0:
            t = time.perf_counter()
            ops += backend.run_ops(busy_s)
            busy += time.perf_counter() - t
        if idle_s > 0:
            time.sleep(idle_s)
        t = time.perf_counter()
        got = coll.all_reduce([1.0, 1.0 if state.want_stop.is_set() else 0.0])
        ar += time.perf_counter() - t
        n += 1
        total += 1
        state.step_done()
        if round(got[0]) != args.nnodes:
            raise RuntimeError("all-reduce returned %r for the member count, expected %d" % (got[0], args.nnodes))
        if got[1] > 0:
            if state.stop_reason is None:
                state.stop_reason = ("rank 0 stopped the group (ShutdownReq)" if r
                                     else "a member ended the group (its lifetime)")
            return
        now = time.monotonic()
        if next_log is None and now >= ready_at:
            state.phase = "ready"
            state.ready.set()
            if r == 0:
                gl.log(gl.READY_LINE)
            else:
                dummy_health_server(args.host, args.port, gl.log)
            window, next_log, ops, busy, ar, n = now, now + args.log_interval, 0.0, 0.0, 0.0, 0
        elif next_log is not None and now >= next_log and r == 0:
            span = max(1e-9, now - window)
            log_tp(r, gl.decode_line(n / span, ops * backend.flops_per_op / span / 1e12, held, busy / span, total)
                   + ", all-reduce: %.3f ms/step, steps: %d" % (1000.0 * ar / max(1, n), total))
            window, next_log, ops, busy, ar, n = now, now + args.log_interval, 0.0, 0.0, 0.0, 0


# ------------------------------------------------------------------ main

def open_collective(args, backend):
    if args.no_gpu:
        return TcpCollective(args)
    try:
        return TorchCollective(args, backend)
    except (ImportError, RuntimeError) as e:
        gl.log("GPU load cannot start: %s" % e, sys.stderr)
    sys.exit(gl.EXIT_NO_CUDA)


def main(argv=None) -> int:
    args = parse_args(argv)
    env = group_env(args)
    os.environ.update(env)
    state = GroupState()
    t_end = time.monotonic() + args.lifetime
    stop_by = [None]  # monotonic time by which the group must have ended cleanly

    def on_signal(signum, _frame):
        if args.node_rank:  # SGLang's non-zero node ranks wait for rank 0's shutdown broadcast
            gl.log(SHUTDOWN_REQ_LINE % args.node_rank)
            return
        if state.stop_reason is None:
            state.stop_reason = "received %s" % signal.Signals(signum).name
        state.want_stop.set()
        stop_by[0] = stop_by[0] or time.monotonic() + STOP_GRACE_S

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    gl.log("group_load pid=%d node_rank=%d/%d args=%s CUDA_VISIBLE_DEVICES=%s env=%s" % (
        os.getpid(), args.node_rank, args.nnodes, " ".join(sys.argv[1:] if argv is None else argv),
        os.environ.get("CUDA_VISIBLE_DEVICES"), " ".join("%s=%s" % kv for kv in sorted(env.items()))))
    backend = gl.open_backend(args)
    coll = open_collective(args, backend)
    try:
        coll.bind()
    except OSError as e:  # torch's TCPStore server words
        gl.log("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
               "address. port: %d, useIpv6: 0, code: %d, name: %s, message: %s" % (
                   args.dist_init_addr[1], -(e.errno or 98), "EADDRINUSE" if e.errno == 98 else "E%s" % e.errno,
                   (e.strerror or str(e)).lower()))
        return 1
    srv = None
    if args.node_rank == 0:
        try:
            srv = start_http(state, args.host, args.port)
        except OSError as e:
            gl.log("ERROR:    [Errno %s] error while attempting to bind on address ('%s', %d): %s" % (
                e.errno, args.host, args.port, e.strerror))
            return 1
        gl.log("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (args.host, args.port))
    threading.Thread(target=scheduler, args=(args, state, backend, coll), name="scheduler", daemon=True).start()
    while not state.done.wait(0.05):
        now = time.monotonic()
        if now >= t_end and stop_by[0] is None:
            state.stop_reason = state.stop_reason or "lifetime of %.0f s reached" % args.lifetime
            state.want_stop.set()
            stop_by[0] = now + STOP_GRACE_S
        if stop_by[0] is not None and now >= stop_by[0]:  # the group did not end: a collective never returned
            state.quit.set()
            hung = coll.hung_since
            gl.log("Shutting down: %s (%s)." % (state.stop_reason, "a collective blocked since %s" % time.strftime(
                "%H:%M:%S", time.localtime(hung)) if hung else "the group did not end together"))
            os._exit(0)  # no teardown: NCCL's would wait on the hung collective
    if srv is not None:
        srv.shutdown()
        srv.server_close()
    if state.failed:
        gl.log("Received sigquit from a child process. It usually means the child failed.")
        os._exit(1)
    closer = threading.Thread(target=coll.close, daemon=True)
    closer.start()
    closer.join(5.0)
    gl.log("Shutting down: %s." % (state.stop_reason or "stopped"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
