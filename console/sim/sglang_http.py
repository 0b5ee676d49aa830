"""The SGLang stand-in's serving side: a token engine and its HTTP API (stdlib ``http.server``).

Tokens flow in real time (not scaled by ``MTPCONSOLE_SIM_SPEED``): about 27 tok/s per request
without speculative decoding (the incident's figure) and ``27 × accept length`` with EAGLE/MTP
(accept length ≈ 3 for 3/1/4). At most ``max_running_requests`` run at once; the rest queue.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

BASE_TOKENS_PER_S = 27.0
LATENCY_S = max(0.0, float(os.environ.get("MTPCONSOLE_SIM_LATENCY_S", "0") or 0))
"""Each request's least duration in seconds (``$MTPCONSOLE_SIM_LATENCY_S``, default 0): traffic through a gateway
keeps requests in flight for a roll to drain."""
DECODE_STEPS_PER_LOG = 40
MAX_BODY = 4 * 1024 * 1024
WORDS = (" the", " model", " thinks", " about", " memory", ",", " then", " it", " answers", " step",
         " by", " step", ".", " Speculative", " decoding", " drafts", " tokens", " quickly", " and",
         " verifies", " them", " in", " one", " pass", ";", " so", " throughput", " rises", "\n")


class Req:
    """One generation request inside the engine."""

    def __init__(self, prompt_tokens: int, max_tokens: int, stream: bool) -> None:
        self.id = uuid.uuid4().hex
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.stream = stream
        self.produced = 0
        self.progress = 0.0
        self.done = False
        self.cancelled = False
        self.created = time.time()
        self.due = time.monotonic() + LATENCY_S
        """Not done before this (``$MTPCONSOLE_SIM_LATENCY_S``): the request counts as running until then."""
        self.first_token_at: float | None = None
        self.cond = threading.Condition()


class Engine:
    """Continuous-batching token engine: admits, decodes at the simulated rate, logs decode batches."""

    def __init__(self, *, max_running: int, accept_len: float, spec: bool, hybrid: bool,
                 max_total_tokens: int, mamba_slots: int, send: Callable[[dict], None]) -> None:
        self.max_running = max(1, max_running)
        self.accept_len = accept_len
        self.spec = spec
        self.hybrid = hybrid
        self.max_total_tokens = max(1, max_total_tokens)
        self.mamba_slots = max(1, mamba_slots)
        self.send = send
        self.lock = threading.Lock()
        self.queue: list[Req] = []
        self.running: list[Req] = []
        self.stop = threading.Event()
        self.last_gen_throughput = 0.0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.served_any = False
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, prompt_tokens: int, max_tokens: int, stream: bool) -> Req:
        r = Req(prompt_tokens, max_tokens, stream)
        with self.lock:
            self.queue.append(r)
            self.requests_total += 1
            self.prompt_tokens_total += prompt_tokens
            self.served_any = True
        return r

    def counts(self) -> tuple[int, int, int]:
        with self.lock:
            tokens = sum(r.prompt_tokens + r.produced for r in self.running)
            return len(self.running), len(self.queue), tokens

    def idle(self) -> bool:
        with self.lock:
            return not self.running and not self.queue

    def _per_request_rate(self, n: int) -> float:
        return BASE_TOKENS_PER_S * self.accept_len / (1.0 + 0.002 * n)

    def _busy(self, n: int) -> float:
        return 0.0 if n == 0 else min(1.0, 0.55 + 0.45 * n / min(self.max_running, 32))

    def usage_line_parts(self, running: int, tokens: int) -> str:
        if self.hybrid:
            return ("#full token: %d, full token usage: %.2f, mamba num: %d, mamba usage: %.2f"
                    % (tokens, tokens / self.max_total_tokens, running, min(1.0, running / self.mamba_slots)))
        return "#token: %d, token usage: %.2f" % (tokens, tokens / self.max_total_tokens)

    def _loop(self) -> None:
        last = time.monotonic()
        log_every = DECODE_STEPS_PER_LOG / BASE_TOKENS_PER_S
        next_log = last + log_every
        window_tokens = 0
        window_start = last
        last_busy = -1.0
        recent: list[tuple[float, int]] = []
        while not self.stop.wait(0.05):
            now = time.monotonic()
            dt = now - last
            last = now
            admitted: list[Req] = []
            finished: list[Req] = []
            with self.lock:
                self.running = [r for r in self.running if not r.cancelled]
                self.queue = [r for r in self.queue if not r.cancelled]
                while self.queue and len(self.running) < self.max_running:
                    r = self.queue.pop(0)
                    self.running.append(r)
                    admitted.append(r)
                n = len(self.running)
                rate = self._per_request_rate(n)
                for r in self.running:
                    r.progress = min(float(r.max_tokens), r.progress + rate * dt)
                    new = int(r.progress) - r.produced
                    if new > 0:
                        with r.cond:
                            r.produced += new
                            if r.first_token_at is None:
                                r.first_token_at = time.time()
                            if r.produced >= r.max_tokens and now >= r.due:
                                r.done = True
                            r.cond.notify_all()
                        window_tokens += new
                        recent.append((now, new))
                        self.generation_tokens_total += new
                    if not r.done and r.produced >= r.max_tokens and now >= r.due:
                        with r.cond:  # its tokens came before its latency was over
                            r.done = True
                            r.cond.notify_all()
                    if r.done:
                        finished.append(r)
                self.running = [r for r in self.running if not r.done]
                running, queued = len(self.running), len(self.queue)
                tokens = sum(r.prompt_tokens + r.produced for r in self.running)
            if admitted:
                new_tok = sum(r.prompt_tokens for r in admitted)
                if self.hybrid:
                    usage = "full token usage: %.2f, mamba usage: %.2f" % (
                        tokens / self.max_total_tokens, min(1.0, running / self.mamba_slots))
                else:
                    usage = "token usage: %.2f" % (tokens / self.max_total_tokens)
                self.send({"log": "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, %s, "
                                  "#running-req: %d, #queue-req: %d" % (len(admitted), new_tok, usage,
                                                                         running - len(admitted), queued)})
            recent = [x for x in recent if now - x[0] <= 2.0]
            self.last_gen_throughput = sum(n for _, n in recent) / 2.0 if recent else 0.0
            busy = self._busy(running)
            if abs(busy - last_busy) > 0.01:
                self.send({"busy": busy})
                last_busy = busy
            if now >= next_log:
                span = max(1e-6, now - window_start)
                thr = window_tokens / span
                if running or window_tokens:
                    spec = ""
                    if self.spec:
                        spec = "accept len: %.2f, accept rate: %.2f, " % (
                            self.accept_len, (self.accept_len - 1) / max(1.0, self.accept_len))
                    self.send({"log": "Decode batch, #running-req: %d, %s, %scuda graph: True, "
                                      "gen throughput (token/s): %.2f, #queue-req: %d"
                                      % (running, self.usage_line_parts(running, tokens), spec, thr, queued)})
                window_tokens = 0
                window_start = now
                next_log = now + log_every


def _text_for(start: int, n: int) -> str:
    return "".join(WORDS[(start + i) % len(WORDS)] for i in range(n))


class SimServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr: tuple[str, int], app: Any) -> None:
        super().__init__(addr, Handler)
        self.app = app


class Handler(BaseHTTPRequestHandler):
    server: SimServer
    protocol_version = "HTTP/1.0"

    def log_message(self, fmt: str, *args: Any) -> None:  # uvicorn-style access lines instead
        pass

    def _access(self, code: int) -> None:
        """Uvicorn's access line for this request, unless its path starts with one of the server's
        ``--uvicorn-access-log-exclude-prefixes`` (SGLang 0.5.23: "Exclude uvicorn access logs whose request path
        starts with any of these prefixes")."""
        if self.path.startswith(tuple(getattr(self.server.app.args, "uvicorn_access_log_exclude_prefixes", None) or ())):
            return
        phrase = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                  405: "Method Not Allowed", 413: "Request Entity Too Large", 503: "Service Unavailable"}.get(code, "")
        host, port = self.client_address[:2]
        self.server.app.access('%s:%d - "%s %s %s" %d %s' % (host, port, self.command, self.path.split("?")[0],
                                                              self.request_version, code, phrase))

    def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (json.dumps(body).encode() if ctype == "application/json"
                                                     else str(body).encode())
        try:
            self.send_response_only(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass
        self._access(code)

    def _error(self, code: int, msg: str) -> None:
        self._send(code, {"object": "error", "message": msg, "type": "BadRequestError" if code == 400 else "Error",
                          "param": None, "code": code})

    def do_GET(self) -> None:  # noqa: N802
        app = self.server.app
        path = self.path.split("?")[0]
        if path in ("/health", "/health_generate"):
            self._send(200 if app.healthy() else 503, b"", "text/plain")
        elif path == "/ready":
            self._send(200 if app.healthy() else 503, {"status": "ready" if app.healthy() else "not ready"})
        elif path in ("/model_info", "/get_model_info", "/server_info", "/get_server_info") and app.fault == "no_info":
            self._send(404, {"detail": "Not Found"})  # an older release / another framework: neither endpoint
        elif path in ("/model_info", "/get_model_info"):
            if path == "/get_model_info":
                app.deprecated(path, "/model_info")
            self._send(200, app.model_info())
        elif path in ("/server_info", "/get_server_info"):
            if path == "/get_server_info":
                app.deprecated(path, "/server_info")
            self._send(200, app.server_info())
        elif path in ("/v1/loads", "/get_loads"):  # what smg's load monitor and /get_loads ask (issue 29)
            self._send(200, app.loads())
        elif path == "/v1/models":
            if not self._authorized():
                return
            self._send(200, app.models())
        elif path == "/metrics":
            if not app.args.enable_metrics:
                self._send(404, {"detail": "Not Found"})
            else:
                self._send(200, app.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, {"detail": "Not Found"})

    def _authorized(self) -> bool:
        key = self.server.app.args.api_key
        if not key:
            return True
        if self.headers.get("Authorization", "") == "Bearer " + key:
            return True
        self._send(401, {"error": "Unauthorized"})
        return False

    def _body(self) -> dict | None:
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self._error(400, "invalid Content-Length")
            return None
        if n > MAX_BODY:
            self._error(413, "request body too large")
            return None
        raw = self.rfile.read(n) if n > 0 else b""
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            self._error(400, "request body is not valid JSON")
            return None
        if not isinstance(body, dict):
            self._error(400, "request body must be a JSON object")
            return None
        return body

    def do_POST(self) -> None:  # noqa: N802
        app = self.server.app
        path = self.path.split("?")[0]
        if path not in ("/v1/completions", "/v1/chat/completions", "/generate"):
            self._send(404, {"detail": "Not Found"})
            return
        if path != "/generate" and not self._authorized():
            return
        body = self._body()
        if body is None:
            return
        if not app.accepting():
            self._error(503, "The server is not ready or is shutting down")
            return
        chat = path == "/v1/chat/completions"
        if path == "/generate":
            sp = body.get("sampling_params") or {}
            prompt = body.get("text") or ""
            max_tokens = sp.get("max_new_tokens", 128) if isinstance(sp, dict) else 128
            stream = bool(body.get("stream"))
        elif chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                self._error(400, "messages must be a non-empty list")
                return
            prompt = "".join(str(m.get("content", "")) if isinstance(m, dict) else "" for m in msgs)
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 128))
            stream = bool(body.get("stream"))
        else:
            prompt = body.get("prompt", "")
            if isinstance(prompt, list):
                prompt = "".join(str(p) for p in prompt)
            max_tokens = body.get("max_tokens", 16)
            stream = bool(body.get("stream"))
        if max_tokens is None:
            max_tokens = 128
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            self._error(400, "max_tokens must be a positive integer")
            return
        prompt_tokens = max(1, len(str(prompt)) // 4)
        if prompt_tokens + max_tokens > app.context_len:
            self._error(400, "Requested token count exceeds the model's maximum context length of %d tokens."
                        % app.context_len)
            return
        req = app.engine.submit(prompt_tokens, max_tokens, stream)
        model = body.get("model") or app.served_name
        if path == "/generate":
            self._generate_native(req, prompt_tokens)
        elif stream:
            self._stream(req, chat, model)
        else:
            self._complete(req, chat, model)

    def _wait(self, req: Req, have: int) -> bool:
        """Wait for tokens beyond ``have``; False if the server stops."""
        app = self.server.app
        with req.cond:
            while req.produced <= have and not req.done:
                if app.engine.stop.is_set():
                    return False
                req.cond.wait(0.25)
        return True

    def _complete(self, req: Req, chat: bool, model: str) -> None:
        while not req.done:
            if not self._wait(req, req.produced):
                self._error(503, "server shut down")
                return
        text = _text_for(0, req.produced)
        rid = ("chatcmpl-" if chat else "cmpl-") + req.id
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}
        else:
            choice["text"] = text
        self._send(200, {
            "id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(req.created),
            "model": model, "choices": [choice],
            "usage": {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.produced,
                      "total_tokens": req.prompt_tokens + req.produced},
        })

    def _generate_native(self, req: Req, prompt_tokens: int) -> None:
        while not req.done:
            if not self._wait(req, req.produced):
                self._error(503, "server shut down")
                return
        self._send(200, {"text": _text_for(0, req.produced),
                         "meta_info": {"id": req.id, "prompt_tokens": prompt_tokens,
                                       "completion_tokens": req.produced, "finish_reason": {"type": "length"}}})

    def _stream(self, req: Req, chat: bool, model: str) -> None:
        rid = ("chatcmpl-" if chat else "cmpl-") + req.id
        obj = "chat.completion.chunk" if chat else "text_completion"
        try:
            self.send_response_only(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self._access(200)
            sent = 0
            if chat:
                self._sse({"id": rid, "object": obj, "created": int(req.created), "model": model,
                           "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}]})
            while True:
                if not self._wait(req, sent):
                    break
                n = req.produced
                if n > sent:
                    piece = _text_for(sent, n - sent)
                    delta = {"content": piece} if chat else None
                    ch: dict[str, Any] = {"index": 0, "finish_reason": None, "logprobs": None}
                    if chat:
                        ch["delta"] = delta
                    else:
                        ch["text"] = piece
                    self._sse({"id": rid, "object": obj, "created": int(req.created), "model": model, "choices": [ch]})
                    sent = n
                if req.done and sent >= req.produced:
                    break
            end: dict[str, Any] = {"index": 0, "finish_reason": "length", "logprobs": None}
            if chat:
                end["delta"] = {}
            else:
                end["text"] = ""
            self._sse({"id": rid, "object": obj, "created": int(req.created), "model": model, "choices": [end],
                       "usage": {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.produced,
                                 "total_tokens": req.prompt_tokens + req.produced}})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            req.cancelled = True  # client went away

    def _sse(self, obj: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()
