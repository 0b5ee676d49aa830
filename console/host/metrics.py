"""Prometheus text from the servers that export it, fetched off the agent's loop, shipped raw.

Stdlib only, Python >= 3.8; shipped with the agent. A launcher started with ``--enable-metrics``
has its ``http://127.0.0.1:<port>/metrics`` fetched once per tick by a worker thread, each server bounded in
time (``FETCH_TIMEOUT_S`` for the whole request: a server trickling its answer is cut off there, and the others
are still fetched) and size (``MAX_BYTES``). :func:`http_get` is also the agent's ``http_get`` op (``/health``). The host never parses
the text: it ships it with its fetch time (``metrics_text``, ``metrics_at``, ``metrics_error`` on
the launcher's entry in the sample) and the console reads it.
"""

import socket
import threading
import time
from typing import Any, Dict, List

FETCH_TIMEOUT_S = 0.5
"""The whole request (connect, headers, body) must finish within this; else an error value."""
MAX_BYTES = 2 << 20
"""A larger body is cut here (and flagged ``metrics_truncated``)."""
DEFAULT_PORTS = {"sglang": 30000, "vllm": 8000}


def metrics_port(argv, framework):
    """The HTTP port of a launcher started with ``--enable-metrics`` (None when metrics are off)."""
    if "--enable-metrics" not in argv:
        return None
    for i, a in enumerate(argv):
        value = None
        if a == "--port" and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith("--port="):
            value = a.split("=", 1)[1]
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return DEFAULT_PORTS.get(framework)


class HttpError(Exception):
    """A GET that did not finish: refused, reset, not HTTP, or past its deadline (the message says which)."""


def http_get(port, path, timeout, max_bytes, accept="*/*"):
    """GET ``path`` on 127.0.0.1:``port`` (then ::1) within ``timeout`` seconds for the WHOLE request: connect,
    status line, headers and body. A server that trickles (a byte every 0.3 s keeps any per-read timeout from
    firing) is cut off at the deadline. Returns ``(status, body, truncated)`` (the body cut at ``max_bytes``);
    raises HttpError."""
    timeout = max(0.05, float(timeout))
    deadline = time.monotonic() + timeout
    sock = _connect(port, deadline)
    try:
        request = "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\nAccept: %s\r\nConnection: close\r\n\r\n" % (
            path, int(port), accept)
        sock.sendall(request.encode("ascii"))
        data, truncated = _read(sock, deadline, timeout, max_bytes + 64 * 1024)  # headers on top of the body's cap
    finally:
        sock.close()
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        raise HttpError("the answer ended inside its headers" if not truncated else "headers larger than 64 KiB")
    lines = head.split(b"\r\n")
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise HttpError("not an HTTP answer: %r" % lines[0][:80])
    headers = dict((k.strip().lower(), v.strip()) for k, _, v in (x.partition(b":") for x in lines[1:]))
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = _unchunk(body)
    truncated = truncated or len(body) > max_bytes
    return int(parts[1]), body[:max_bytes], truncated


def _connect(port, deadline):
    last = None
    for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            s.connect((addr, int(port)))
            return s
        except OSError as e:
            s.close()
            last = e
            if time.monotonic() >= deadline:
                break
    raise HttpError("cannot connect: %s" % (_why(last) if last else "timed out"))


def _read(sock, deadline, timeout, limit):
    """Everything the server sends until it closes, at most ``limit`` bytes, before ``deadline``."""
    chunks: List[bytes] = []
    size = 0
    while size <= limit:
        left = deadline - time.monotonic()
        late = HttpError("timed out: no whole answer within %g s (%d bytes came)" % (timeout, size))
        if left <= 0:
            raise late
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(65536, limit + 1 - size))
        except socket.timeout:
            raise late
        except OSError as e:
            raise HttpError(_why(e))
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)[:limit], True


def _unchunk(body):
    out, i = [], 0
    while i < len(body):
        j = body.find(b"\r\n", i)
        if j < 0:
            break
        try:
            n = int(body[i:j].split(b";")[0], 16)
        except ValueError:
            raise HttpError("a bad chunk size in the answer")
        if n == 0:
            break
        out.append(body[j + 2:j + 2 + n])
        i = j + 2 + n + 2
    return b"".join(out)


def _why(e):
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def fetch(port, timeout=FETCH_TIMEOUT_S, max_bytes=MAX_BYTES):
    """GET /metrics on 127.0.0.1:port: {"metrics_text", "metrics_at", "metrics_error", "metrics_truncated"};
    the whole request within ``timeout`` (see :func:`http_get`)."""
    out: Dict[str, Any] = {"metrics_text": None, "metrics_at": time.time(), "metrics_error": None,
                           "metrics_truncated": False}
    try:
        status, body, truncated = http_get(port, "/metrics", timeout, max_bytes, accept="text/plain")
        if status != 200:
            out["metrics_error"] = "GET /metrics answered HTTP %d" % status
        else:
            out["metrics_text"] = body.decode("utf-8", "replace")
            out["metrics_truncated"] = truncated
    except HttpError as e:
        out["metrics_error"] = "GET /metrics failed: %s" % e
    out["metrics_at"] = time.time()
    return out


class MetricsFetcher(object):
    """Fetches the metrics of a set of targets in a worker thread; ``latest`` never blocks."""

    def __init__(self):
        self.lock = threading.Lock()
        self.targets = {}  # (pid, start_ticks) -> port
        self.results = {}  # (pid, start_ticks) -> fetch() result
        self.busy = False
        self.thread = None

    def request(self, targets):
        """Fetch these targets ({(pid, start_ticks): port}) now, unless a round is still running."""
        with self.lock:
            self.targets = dict(targets)
            self.results = dict((k, v) for k, v in self.results.items() if k in self.targets)
            if self.busy or not self.targets:
                return
            self.busy = True
        self.thread = threading.Thread(target=self._round, name="metrics", daemon=True)
        self.thread.start()

    def _round(self):
        try:
            with self.lock:
                targets = list(self.targets.items())
            for key, port in targets:
                result = fetch(port)
                with self.lock:
                    if key in self.targets:
                        self.results[key] = result
        finally:
            with self.lock:
                self.busy = False

    def latest(self, key):
        """The last fetch result for a target, or None."""
        with self.lock:
            return self.results.get(key)
