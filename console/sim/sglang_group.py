"""Multi-node for the SGLang stand-in: ``--nnodes N --node-rank R --dist-init-addr HOST:PORT`` (issue 30).

What real SGLang 0.5.23 does, and what this models (read from its source, not copied):

- Every node runs the same command with its own ``--node-rank``; ``tp_size`` must be divisible by
  ``nnodes`` (``AssertionError: tp_size must be divisible by number of nodes``) and each node starts
  ``tp_size / nnodes`` schedulers, global TP ranks ``tp_per_node * node_rank ...``, local GPUs from
  ``--base-gpu-id``.
- The schedulers rendezvous through torch.distributed at ``tcp://HOST:PORT`` (the rank-0 scheduler
  hosts the store there; the others retry connecting until the distributed timeout). Nothing passes
  ``Init parallel begin.`` -> ``Init parallel ends.`` until every rank joined, so rank 0 can never
  become ready (nor serve HTTP) alone: the nodes must be started all at once, order irrelevant.
  Here rank 0's launcher listens on the address and each other rank's launcher connects (retrying);
  when all ``nnodes - 1`` peers said hello, rank 0 answers ``go`` and the schedulers pass the gate.
- Node ranks >= 1 run no tokenizer or detokenizer; once their schedulers are ready they serve a
  dummy health server on their own ``--host``/``--port`` (``/health``, ``/health_generate``,
  ``/ping`` answer 200 whatever the schedulers do) and block until their schedulers exit. Their
  SIGTERM handler only logs ``SIGTERM received on node_rank R; waiting for the rank-0 ShutdownReq
  broadcast to stop the schedulers.``: only rank 0's shutdown (or SIGKILL) ends them.
- When a peer dies, NCCL does not notice: the survivors hang in their next collective, print
  nothing, keep their GPU memory, and rank 0 keeps answering ``/health`` 200 while no request
  completes. The stand-in learns of the death from the rendezvous socket's EOF and then *stalls*
  (never exits): the realistic worst case the console has to see through.

Stdlib only; used by :mod:`console.sim.sglang` (the launcher) only.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

CONNECT_RETRY_S = 0.5
"""How often a rank >= 1 retries the rendezvous connection (torch's store client retries the same way)."""
CONNECT_WARN_EVERY = 20
"""Every this many failed attempts, one warning line (not one per attempt: the log stays readable)."""


def connect_failed_line(addr: tuple[str, int], e: OSError) -> str:
    """torch's store client's warning when the rendezvous address does not answer (yet)."""
    return ("[W] The client socket has failed to connect to [%s]:%d (errno: %d - %s)."
            % (addr[0], addr[1], e.errno or 111, e.strerror or str(e)))
HANG_MAX_S = 7 * 24 * 3600.0
"""A hung member hangs this long at most (a bound, not a behaviour)."""


def split_addr(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port); ValueError when it is not one."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("invalid --dist-init-addr %r: expected HOST:PORT" % addr)
    return host.strip("[]"), int(port)


def local_ranks(tp_size: int, nnodes: int, node_rank: int) -> range:
    """The global TP ranks whose schedulers run on this node."""
    per = tp_size // max(1, nnodes)
    return range(per * node_rank, per * (node_rank + 1))


def stall(engine: Any) -> None:
    """A hung collective as the HTTP front sees it: nothing is admitted and nothing decodes any more."""
    engine.max_running = 0
    engine.accept_len = 0.0


class Rendezvous:
    """The members' TCP rendezvous at ``--dist-init-addr`` and the link that tells a survivor its peer is gone.

    ``joined`` is set once every rank is in (then ``on_joined`` runs once); ``lost`` once a peer's
    connection ends without rank 0's shutdown (``lost_rank`` names it); ``shutdown`` once rank 0
    said it is stopping the group cleanly.
    """

    def __init__(self, nnodes: int, node_rank: int, addr: tuple[str, int] | None,
                 log: Callable[[str], None], on_joined: Callable[[], None]) -> None:
        self.nnodes = nnodes
        self.node_rank = node_rank
        self.addr = addr
        self.log = log
        self.on_joined = on_joined
        self.joined = threading.Event()
        self.lost = threading.Event()
        self.shutdown = threading.Event()
        self.lost_rank: int | None = None
        self.peers: dict[int, socket.socket] = {}
        self.server: socket.socket | None = None
        self._lock = threading.Lock()

    def bind(self) -> None:
        """Rank 0 listens on the address (OSError when it cannot: a stale member may hold it)."""
        if self.node_rank == 0 and self.addr is not None:
            self.server = socket.create_server(self.addr, backlog=max(8, self.nnodes))

    def start(self) -> None:
        """Accept (rank 0) or connect (the others) on a daemon thread; ``on_joined`` may run from it."""
        target = self._head if self.node_rank == 0 else self._member
        threading.Thread(target=target, name="rendezvous", daemon=True).start()

    # ------------------------------------------------------------ rank 0
    def _head(self) -> None:
        if self.server is None:  # no --dist-init-addr: nobody can find us; wait as the real one does
            return
        while len(self.peers) < self.nnodes - 1:
            try:
                conn, _ = self.server.accept()
                conn.settimeout(10.0)
                hello = _read_line(conn)
                rank = int(hello.get("rank", -1))
            except (OSError, ValueError, TypeError):
                continue
            if not 0 < rank < self.nnodes or rank in self.peers:
                conn.close()
                continue
            conn.settimeout(None)
            self.peers[rank] = conn
        for conn in self.peers.values():
            _send(conn, {"go": True})
        self._joined()
        for rank, conn in self.peers.items():
            threading.Thread(target=self._watch, args=(rank, conn), name="peer%d" % rank, daemon=True).start()

    def stop_peers(self) -> None:
        """Rank 0 stops cleanly: tell every peer (their schedulers exit, as after SGLang's ShutdownReq)."""
        with self._lock:
            self.shutdown.set()
            for conn in self.peers.values():
                _send(conn, {"shutdown": True})

    # ------------------------------------------------------------ rank >= 1
    def _member(self) -> None:
        if self.addr is None:
            return
        tries = 0
        conn: socket.socket | None = None
        deadline = time.monotonic() + HANG_MAX_S
        while conn is None and time.monotonic() < deadline:
            try:
                conn = socket.create_connection(self.addr, timeout=5.0)
            except OSError as e:
                tries += 1
                if tries % CONNECT_WARN_EVERY == 1:
                    self.log(connect_failed_line(self.addr, e))
                time.sleep(CONNECT_RETRY_S)
        if conn is None:
            return
        try:
            _send(conn, {"rank": self.node_rank})
            conn.settimeout(None)
            msg = _read_line(conn)
        except (OSError, ValueError):
            msg = {}
        if not msg.get("go"):
            self._lose(0)
            return
        self.peers[0] = conn
        self._joined()
        self._watch(0, conn)

    # ------------------------------------------------------------ both
    def _joined(self) -> None:
        self.joined.set()
        self.on_joined()

    def _watch(self, rank: int, conn: socket.socket) -> None:
        """Until the peer's socket ends: a shutdown word is a clean stop, a bare EOF a dead peer."""
        while True:
            try:
                msg = _read_line(conn)
            except (OSError, ValueError):
                msg = {}
            if msg.get("shutdown"):
                self.shutdown.set()
                continue
            if not msg:
                if not self.shutdown.is_set():
                    self._lose(rank)
                return

    def _lose(self, rank: int) -> None:
        if self.lost_rank is None:
            self.lost_rank = rank
        self.lost.set()


def _send(conn: socket.socket, msg: dict) -> None:
    try:
        conn.sendall((json.dumps(msg) + "\n").encode())
    except OSError:
        pass


def _read_line(conn: socket.socket, limit: int = 4096) -> dict:
    """One JSON line from ``conn``; {} at EOF."""
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            return {}
        buf += chunk
        if len(buf) > limit:
            raise ValueError("line too long")
    out = json.loads(buf.decode("utf-8"))
    return out if isinstance(out, dict) else {}


class _Dummy(BaseHTTPRequestHandler):
    def log_message(self, fmt: str, *args: Any) -> None:  # SGLang starts it with log_level=warning: no access lines
        pass

    def do_GET(self) -> None:  # noqa: N802
        code = 200 if self.path.split("?", 1)[0] in ("/health", "/health_generate", "/ping") else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()


def dummy_health_server(host: str, port: int, log: Callable[[str], None]) -> ThreadingHTTPServer | None:
    """Node rank >= 1's health server: 200 on /health, /health_generate and /ping whatever the schedulers do.

    When it cannot bind, SGLang logs the failure from its thread and the node keeps running; so does this.
    """
    try:
        srv = ThreadingHTTPServer((host, port), _Dummy)
    except OSError as e:
        log("Dummy health check server failed to start: [Errno %d] error while attempting to bind on address "
            "('%s', %d): %s" % (e.errno or 98, host, port, (e.strerror or str(e)).lower()))
        return None
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, name="health-check-server",
                     daemon=True).start()
    return srv
