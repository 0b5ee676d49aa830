"""A small bounded load generator: concurrent OpenAI chat requests to a server on 127.0.0.1 only.

Used by ``mtpconsole load`` and the demo to make a stand-in (or a real local server) busy.
Streams each response and counts content chunks as tokens (usage from the final chunk when the
server reports it). Stdlib only (threads + http.client).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Optional

from pydantic import BaseModel

ALLOWED_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_CONCURRENCY = 512
MAX_REQUESTS = 100_000


class LoadResult(BaseModel):
    """What a load run achieved."""

    requests_ok: int
    requests_failed: int
    completion_tokens: int
    elapsed_s: float
    tokens_per_s: float
    per_request_tokens_per_s: float | None = None
    errors: list[str] = []


def _check_host(host: str) -> None:
    if host not in ALLOWED_HOSTS:
        raise ValueError(f"load generation is limited to 127.0.0.1/localhost/::1, not {host!r}")


def one_request(host: str, port: int, max_tokens: int, *, timeout: float = 60.0, api_key: Optional[str] = None,
                model: str = "default") -> tuple[int, float]:
    """Send one streaming chat completion; return (completion tokens, seconds). Raises on failure."""
    _check_host(host)
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Write about GPUs."}],
                       "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}})
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.monotonic()
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read(300).decode('utf-8', 'replace').strip()}")
        chunks = 0
        usage = None
        for _ in range(max_tokens * 4 + 100):  # bounded: one line per event at most
            line = resp.readline(1 << 20)
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                break
            try:
                ev = json.loads(data)
            except ValueError:
                continue
            if ev.get("usage"):
                usage = ev["usage"].get("completion_tokens")
            for ch in ev.get("choices") or []:
                if (ch.get("delta") or {}).get("content"):
                    chunks += 1
        return (usage if isinstance(usage, int) else chunks), time.monotonic() - t0
    finally:
        conn.close()


def run_load(port: int, *, host: str = "127.0.0.1", concurrency: int = 4, requests: Optional[int] = None,
             duration: Optional[float] = None, max_tokens: int = 64, api_key: Optional[str] = None,
             timeout: float = 60.0, model: str = "default") -> LoadResult:
    """Run ``concurrency`` workers until ``requests`` are done or ``duration`` seconds passed (default 8 requests)."""
    _check_host(host)
    if not 1 <= port <= 65535:
        raise ValueError(f"port must be 1..65535, got {port}")
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be 1..{MAX_CONCURRENCY}")
    if not 1 <= max_tokens <= 1_000_000:
        raise ValueError("max tokens must be positive")
    if requests is None and duration is None:
        requests = 8
    if requests is not None and not 1 <= requests <= MAX_REQUESTS:
        raise ValueError(f"requests must be 1..{MAX_REQUESTS}")
    if duration is not None and not 0 < duration <= 24 * 3600:
        raise ValueError("duration must be positive (at most a day)")
    lock = threading.Lock()
    state = {"issued": 0, "ok": 0, "failed": 0, "tokens": 0}
    rates: list[float] = []
    errors: list[str] = []
    t0 = time.monotonic()
    deadline = t0 + duration if duration is not None else None

    def take() -> bool:
        with lock:
            if requests is not None and state["issued"] >= requests:
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return False
            state["issued"] += 1
            return True

    def worker() -> None:
        while take():
            try:
                n, secs = one_request(host, port, max_tokens, timeout=timeout, api_key=api_key, model=model)
                with lock:
                    state["ok"] += 1
                    state["tokens"] += n
                    if secs > 0:
                        rates.append(n / secs)
            except Exception as e:  # noqa: BLE001 - reported, not raised
                with lock:
                    state["failed"] += 1
                    if len(errors) < 5:
                        errors.append(str(e) or type(e).__name__)
                if isinstance(e, (ConnectionRefusedError,)):
                    time.sleep(0.2)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=(duration or 0) + timeout * ((requests or 1) + 1))
    elapsed = time.monotonic() - t0
    return LoadResult(requests_ok=state["ok"], requests_failed=state["failed"], completion_tokens=state["tokens"],
                      elapsed_s=round(elapsed, 3), tokens_per_s=round(state["tokens"] / elapsed, 2) if elapsed else 0.0,
                      per_request_tokens_per_s=round(sum(rates) / len(rates), 2) if rates else None, errors=errors)
