"""Prometheus text from the servers that export it, fetched off the agent's loop, shipped raw.

Stdlib only, Python >= 3.8; shipped with the agent. A launcher started with ``--enable-metrics``
has its ``http://127.0.0.1:<port>/metrics`` fetched once per tick by a worker thread, bounded in
time (``FETCH_TIMEOUT_S`` for the whole request) and size (``MAX_BYTES``). The host never parses
the text: it ships it with its fetch time (``metrics_text``, ``metrics_at``, ``metrics_error`` on
the launcher's entry in the sample) and the console reads it.
"""

import http.client
import socket
import threading
import time
from typing import Any, Dict

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


def fetch(port, timeout=FETCH_TIMEOUT_S, max_bytes=MAX_BYTES):
    """GET /metrics on 127.0.0.1:port: {"metrics_text", "metrics_at", "metrics_error", "metrics_truncated"}."""
    deadline = time.monotonic() + timeout
    out: Dict[str, Any] = {"metrics_text": None, "metrics_at": time.time(), "metrics_error": None,
                           "metrics_truncated": False}
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=timeout)
    try:
        conn.request("GET", "/metrics", headers={"Accept": "text/plain"})
        resp = conn.getresponse()
        if resp.status != 200:
            out["metrics_error"] = "GET /metrics answered HTTP %d" % resp.status
            return out
        chunks, size = [], 0
        while size < max_bytes:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("the body took longer than %g s" % timeout)
            if conn.sock is not None:
                conn.sock.settimeout(left)
            chunk = resp.read1(min(65536, max_bytes - size)) if hasattr(resp, "read1") else resp.read(
                min(65536, max_bytes - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        else:
            out["metrics_truncated"] = bool(resp.read(1))
        out["metrics_text"] = b"".join(chunks).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as e:
        out["metrics_error"] = "GET /metrics failed: %s" % (str(e) or type(e).__name__)
    finally:
        conn.close()
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
