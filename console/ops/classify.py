"""Classify an inference server's log (plus its exit record) into ready / loading / failed.

SGLang 0.4.10 -> 0.5.23 is the main target (line formats in the reference ``sglang.md``);
vLLM's ready and stats lines are understood too. The result is a
:class:`console.model.Classification`: the state, for a failure exactly one cause, the
*decisive* line (the most specific one, e.g. ``Not enough memory. Please try to increase
--mem-fraction-static.`` rather than the ``Received sigquit ...`` that follows it), a short
hint for the operator, and the last serving metrics seen.

Two forms:

* :func:`classify` - a pure function over a whole text.
* :class:`LogClassifier` - incremental, for a live log: :meth:`LogClassifier.feed` chunks as
  they arrive (partial lines are joined across chunks), :meth:`LogClassifier.result` at any
  time. Memory is bounded: only the best candidate line per cause, a few flags and the last
  metrics are kept, and at most :data:`MAX_LINE` characters of any line are looked at.

:func:`classify_file` classifies a file on disk from its tail (plus a light scan of its head),
so a 1 GB log is never loaded into memory.

How a state is decided
----------------------
* *ready*: SGLang's ``The server is fired up and ready to roll!``, vLLM's ``Application startup
  complete.``, or evidence of serving (``Decode batch``/``Prefill batch`` lines, a ``200`` to a
  POST or to ``/health``) - the ready line may have scrolled away.
* *failed* before ready: a line naming a specific cause that nothing normal followed, or a
  line showing the process going down (``Received sigquit ...``, ``Scheduler hit an exception``,
  an argparse ``error:`` ...).
* *failed* after ready: only a going-down line or a crash-grade cause (runtime GPU OOM, CUDA,
  NCCL). Warnings, handled request exceptions and ``KV cache pool is full. Retract requests.``
  never fail a healthy server.
* The exit record then refines it: a server that ended on its own is failed whatever the log
  says; ``stopped_by_operator`` only keeps a failure the log shows a real crash for.
"""

from __future__ import annotations

import codecs
import os
import re
import signal as _signal
from dataclasses import dataclass, field
from typing import BinaryIO

from console.model import Classification, ExitRecord, FailureCause, ServeMetrics

__all__ = [
    "MAX_LINE",
    "TAIL_BYTES",
    "HEAD_SCAN_BYTES",
    "LogClassifier",
    "classify",
    "classify_file",
]

MAX_LINE = 64 * 1024
"""Characters of one line that are looked at; the rest of a longer line is ignored."""

MAX_RETURNED_LINE = 1000
"""Longest decisive line returned (longer ones are cut and end with an ellipsis)."""

TAIL_BYTES = 8 * 1024 * 1024
"""classify_file reads at most this many bytes from the end of a file."""

HEAD_SCAN_BYTES = 16 * 1024 * 1024
"""classify_file scans at most this many bytes from the start of a big file for the ready line."""

_FRESH_BONUS = 10
"""A candidate followed by normal progress is probably not what killed the server."""

# ---------------------------------------------------------------- line cleaning

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SGLANG_PREFIX = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z]{1,4}\d+){0,6}\] ?"
)
_VLLM_PREFIX = re.compile(
    r"(?:\([\w.\-]{1,64} pid=\d+\) ?)?"
    r"(?:(INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]{0,200}\] ?)?"
)
_QUIET_LEVELS = ("INFO", "WARNING", "DEBUG")
_UVICORN_QUIET = ("INFO:", "WARNING:", "DEBUG:")
_PYWARN = re.compile(r"\S+:\d+: \w*Warning: ")
_BENIGN = ("Ignore import error",)

# ---------------------------------------------------------------- ready, serving, progress

_READY = "fired up and ready to roll"
_APP_STARTUP = "Application startup complete"
_HTTP = re.compile(r'"(POST|GET) (\S{1,300}) HTTP/[\d.]+" (\d{3})')
_BATCH = re.compile(r"\b(Decode|Prefill) batch[.,]")
_PROGRESS = re.compile(
    r"Load weight (?:begin|end)|Cache is allocated|Memory pool end|Capture cuda graph (?:begin|end)"
    r"|Capture \w+ \w+ CUDA graph end"
    r"|max_total_num_tokens=|Uvicorn running on|checkpoint shards|Init torch distributed"
    r"|Model loading took|Loading weights took|Graph capturing finished|Started server process"
)

_NUM = r"(\d+(?:\.\d+)?)"
_M_RUNNING = re.compile(r"#running-req: (\d+)")
_M_QUEUE = re.compile(r"#queue-req: (\d+)")
_M_TOKEN_USAGE = re.compile(r"(?:(full|swa) )?token[ -]usage: " + _NUM)
_M_GEN = re.compile(r"gen throughput \(token/s\): " + _NUM)
_M_ACCEPT = re.compile(r"accept len: " + _NUM)
_V_GEN = re.compile(r"Avg generation throughput: " + _NUM)
_V_RUNNING = re.compile(r"Running: (\d+) reqs")
_V_QUEUE = re.compile(r"(?:Waiting|Pending): (\d+) reqs")
_V_USAGE = re.compile(r"GPU KV cache usage: " + _NUM + "%")
_V_ACCEPT = re.compile(r"Mean acceptance length: " + _NUM)

# ---------------------------------------------------------------- fatal lines

_EXC = re.compile(
    r"((?:[A-Za-z_]\w{0,80}\.){0,8}[A-Za-z_]\w{0,80}?(?:Error|Exception|Exit|Interrupt|Failure))(?::|$)"
)
_EXC_IGNORED = ("KeyboardInterrupt", "SystemExit", "CancelledError", "GeneratorExit")
_SPEC_WORDS = re.compile(r"[Ss]peculative|[Dd]raft[ _]?model|\bdraft\b|EAGLE|[Ee]agle|NEXTN|[Nn]ext[Nn]\b|\bMTP\b")
_INTEREST = (
    "error", "memory", "sigquit", "crash", "died", "killed", "in use", "eaddrinuse", "nccl",
    "cuda", "not found", "notfound", "not a local folder", "does not appear", "can't load",
    "gated", "exception", "fatal", "fault", "abort", "core dumped", "terminate called", "fail",
    "interrupt", "nvidia", "driver", "symbol", "shared object", "speculative", "draft", "engine",
    "not available", "not enough", "no available", "no module", "larger than", "exit",
    "no such file", "incorrect path", "errno", "watchdog", "runs out of",
)


@dataclass(frozen=True, slots=True)
class _Rule:
    """A family of fatal lines: its cause, how specific it is, and how it behaves."""

    name: str
    cause: FailureCause
    score: int
    rx: re.Pattern[str]
    crash: bool = False
    """Fatal even after the server was ready."""
    terminal: bool = False
    """The process is going down (whatever the cause)."""
    stop_induced: bool = False
    """Also what an operator's stop produces: no proof of a crash by itself."""
    exception_only: bool = False
    """Only counts on an exception line (``SomeError: ...`` at column 0)."""


def _r(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


_RULES: tuple[_Rule, ...] = (
    _Rule("kv_pool", "gpu_oom", 95, _r(
        r"Not enough memory\. Please try to increase --mem-fraction-static"
        r"|Loaded weights leave no GPU memory for the KV cache")),
    _Rule("cuda_oom", "gpu_oom", 90, _r(
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation"
        r"|CUBLAS_STATUS_ALLOC_FAILED|CUDA_ERROR_OUT_OF_MEMORY"), crash=True),
    _Rule("runtime_oom", "gpu_oom", 90, _r(
        r"(?:Prefill|Decode) out of memory\. Try to lower|\bOut of memory\. Try to lower your batch size"
        r"|Not enough space for mamba|alloc_req_slots runs out of memory"), crash=True),
    _Rule("graph_oom", "gpu_oom", 91, _r(r"Capture cuda graph failed"), crash=True),
    _Rule("vllm_oom", "gpu_oom", 90, _r(
        r"No available memory for the cache blocks|larger than the available KV cache memory")),
    _Rule("mem_generic", "gpu_oom", 60, _r(r"\bNot enough memory\b")),
    _Rule("port", "port_in_use", 85, _r(
        r"[Aa]ddress already in use|EADDRINUSE|\[Errno 98\]|error while attempting to bind on address"
        r"|\b[Pp]ort \d+ is (?:already )?in use|\b[Pp]ort \d+ is not available")),
    _Rule("model", "model_not_found", 85, _r(
        r"does not appear to have a file named|Repository Not Found|RepositoryNotFoundError|HFValidationError"
        r"|is not a local folder and is not a valid model identifier|GatedRepoError|Cannot access gated repo"
        r"|LocalEntryNotFoundError|Revision Not Found|RevisionNotFoundError|Incorrect path_or_model_id"
        r"|Can't load (?:the )?(?:tokenizer|config|configuration|model) for")),
    _Rule("model_file", "model_not_found", 80, _r(
        r"(?:FileNotFoundError|No such file or directory).{0,500}?(?:config\.json|tokenizer|\.safetensors)"),
        exception_only=True),
    _Rule("driver", "cuda_driver", 82, _r(
        r"CUDA driver version is insufficient|no CUDA-capable device is detected|Found no NVIDIA driver"
        r"|NVIDIA driver on your system is too old|No CUDA GPUs are available|Torch not compiled with CUDA"
        r"|cudaErrorNoDevice|cudaErrorInsufficientDriver|CUDA_ERROR_NO_DEVICE|CUDA_ERROR_NOT_INITIALIZED"
        r"|forward compatibility was attempted on non supported HW|libcuda\.so\S*: cannot open shared object"
        r"|CUDA unknown error|unsupported display driver / cuda driver combination"), crash=True),
    _Rule("cuda_error", "cuda_driver", 75, _r(
        r"CUDA error: |cudaError\w+|CUDA_ERROR_\w+|device-side assert triggered"
        r"|an illegal memory access was encountered"), crash=True),
    _Rule("nccl", "nccl_error", 75, _r(
        r"NCCL error|nccl(?:Internal|System|UnhandledCuda|InvalidUsage|InvalidArgument|Remote)Error"
        r"|DistBackendError|Watchdog caught collective operation timeout|NCCL communicator was aborted"
        r"|ProcessGroupNCCL.{0,300}?(?:[Tt]imeout|[Ee]rror)|DistNetworkError|DistStoreError"), crash=True),
    _Rule("nccl_warn", "nccl_error", 40, _r(r"NCCL WARN")),
    _Rule("import", "import_error", 80, _r(
        r"^(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError)\b|undefined symbol: |cannot open shared object file"),
        exception_only=True),
    _Rule("argparse", "bad_flags", 95, _r(
        r"^[^\s:][^:]{0,100}: error: (?:unrecognized arguments|ambiguous option|argument |invalid choice"
        r"|the following arguments are required|expected )"), terminal=True),
    _Rule("spec", "spec_decode_error", 70, _SPEC_WORDS, exception_only=True),
    _Rule("spec_msg", "spec_decode_error", 70, _r(
        r"[Ff]ailed to (?:load|initialize|init) (?:the )?draft|[Uu]nknown speculative|[Uu]nsupported speculative"
        r"|[Ss]peculative[\w ]{0,40} (?:is )?not supported")),
    _Rule("warmup", "other", 40, _r(r"Initialization failed\. warmup error"), terminal=True),
    _Rule("vllm_engine", "other", 12, _r(
        r"EngineCore failed to start|Engine core initialization failed|EngineDeadError"
        r"|Engine process failed to start"), terminal=True),
    _Rule("hit_exception", "other", 15, _r(r"hit an exception"), terminal=True),
    _Rule("native_crash", "other", 12, _r(
        r"Fatal Python error|Segmentation fault|core dumped|terminate called after throwing|^Aborted\b"),
        terminal=True),
    _Rule("sigquit", "other", 10, _r(r"Received sigquit from a child process|SIGQUIT received"),
          terminal=True, stop_induced=True),
    _Rule("killed", "other", 8, _r(r"^Killed$"), terminal=True, stop_induced=True),
)
_RULES_BY_NAME = {r.name: r for r in _RULES}
_CHILD_CRASH = re.compile(r"Subprocess (\S+) \(pid=\d+\) crashed with exit code (-?\d+)")
_RANK_DIED = re.compile(r"Rank (\d+) scheduler died during initialization \(exit code: (-?\d+)\)")
_SIGTERM = re.compile(r"SIGTERM received")


# ---------------------------------------------------------------- candidates

@dataclass(slots=True)
class _Cand:
    """One candidate for the decisive line."""

    cause: FailureCause
    score: int
    seq: int
    line: str
    rule: str
    stop_induced: bool = False
    detail: str | None = None
    """What the hint needs: the rejected flag, the port, the module, the exit code."""


def _better(a: _Cand | None, b: _Cand) -> bool:
    """True when ``b`` beats ``a``: higher score, or equal score and earlier (the root cause)."""
    return a is None or b.score > a.score or (b.score == a.score and b.seq < a.seq)


def _clean(line: str) -> str:
    """The line as shown to the operator: no ANSI, no control characters, bounded length."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    line = _CONTROL.sub("", line).strip()
    if len(line) > MAX_RETURNED_LINE:
        line = line[: MAX_RETURNED_LINE - 1] + "…"
    return line


@dataclass(slots=True)
class _State:
    """Everything the classifier remembers: bounded whatever the log's size."""

    seq: int = 0
    sglang_style: bool = False
    vllm_style: bool = False
    ready_line: str | None = None
    ready_explicit: bool = False
    fresh: dict[str, _Cand] = field(default_factory=dict)
    demoted: dict[str, _Cand] = field(default_factory=dict)
    fresh_strong: bool = False
    fresh_crash: bool = False
    terminal: bool = False
    terminal_real: bool = False
    """A going-down line that an operator's stop does not produce."""
    sigterm_line: str | None = None
    last_line: str | None = None
    usage_seen: bool = False
    in_tb: bool = False
    tb_spec: bool = False
    prev_src: str = ""
    metrics: dict[str, float | int] = field(default_factory=dict)

    def copy(self) -> _State:
        s = _State(**{k: getattr(self, k) for k in self.__slots__})
        s.fresh = dict(self.fresh)
        s.demoted = dict(self.demoted)
        s.metrics = dict(self.metrics)
        return s


class LogClassifier:
    """Incremental classifier for a live log.

    ``feed`` text chunks in order (any split, even mid-line or mid-character for
    :meth:`feed_bytes`); ``result`` may be called at any time and does not change the state.
    Work is linear in the text fed; memory is bounded.
    """

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._max_line = max(256, int(max_line))
        self._st = _State()
        self._partial: list[str] = []
        self._partial_len = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    # ------------------------------------------------------------ input

    def feed(self, text_chunk: str) -> None:
        """Add the next piece of the log (text already decoded)."""
        if not text_chunk:
            return
        if "\r" in text_chunk:
            text_chunk = text_chunk.replace("\r", "\n")
        parts = text_chunk.split("\n")
        last = parts.pop()
        for i, piece in enumerate(parts):
            if i == 0 and self._partial:
                self._append_partial(piece)
                line = "".join(self._partial)
                self._partial.clear()
                self._partial_len = 0
            else:
                line = piece[: self._max_line]
            self._line(self._st, line)
        if last:
            self._append_partial(last)

    def feed_bytes(self, data: bytes) -> None:
        """Add raw bytes; invalid UTF-8 becomes U+FFFD, characters split across chunks are joined."""
        self.feed(self._decoder.decode(data))

    def gap(self) -> None:
        """Mark that part of the log is missing here (e.g. between a file's head and tail)."""
        self._partial.clear()
        self._partial_len = 0
        self._decoder.reset()
        self._st.in_tb = False
        self._st.prev_src = ""

    def _append_partial(self, piece: str) -> None:
        room = self._max_line - self._partial_len
        if room > 0 and piece:
            piece = piece[:room]
            self._partial.append(piece)
            self._partial_len += len(piece)

    # ------------------------------------------------------------ output

    @property
    def lines_seen(self) -> int:
        """Complete non-empty lines processed so far."""
        return self._st.seq

    def result(self, exit: ExitRecord | None = None) -> Classification:
        """The classification of everything fed so far (an unterminated last line included)."""
        st = self._st
        if self._partial:
            st = st.copy()
            self._line(st, "".join(self._partial))
        return _decide(st, exit)

    # ------------------------------------------------------------ one line

    def _line(self, st: _State, raw: str) -> None:
        if "\x00" in raw:
            raw = raw.replace("\x00", "")
        if "\x1b" in raw:
            raw = _ANSI.sub("", raw)
        body = raw
        level = None
        if body[:2] == "[2" or body[:2] == "[1":
            m = _SGLANG_PREFIX.match(body)
            if m:
                st.sglang_style = True
                body = body[m.end():]
        elif body[:1] == "(" or body[:1] in "IWEDC":
            m = _VLLM_PREFIX.match(body)
            if m and m.end():
                level = m.group(1)
                if level or body[:1] == "(":
                    st.vllm_style = True
                body = body[m.end():]
        indented = body[:1] in (" ", "\t")
        body = body.strip()
        if not body:
            return
        st.seq += 1
        st.last_line = raw

        # -- serving, ready, metrics, progress: normal lines end here
        if "batch" in body:
            m = _BATCH.search(body)
            if m:
                _parse_batch(st, body, m.group(1) == "Decode")
                _serving(st, raw)
                return
        if "HTTP/" in body:
            m = _HTTP.search(body)
            if m and m.group(3) == "200" and (
                m.group(1) == "POST" or m.group(2).startswith(("/health", "/ready"))
            ):
                _serving(st, raw)
                return
        if _READY in body:
            _ready(st, raw, explicit=True)
            return
        if "throughput" in body or "acceptance length" in body:
            if _parse_vllm(st, body):
                _serving(st, raw)
                return
        if _APP_STARTUP in body:
            if st.sglang_style and not st.vllm_style:
                _progress(st)  # SGLang: uvicorn is up, warmup still to come
            else:
                _ready(st, raw, explicit=True)
            return
        if _SIGTERM.search(body):
            st.sigterm_line = raw
            return

        # -- tracebacks: frames and source lines are context, never candidates
        tb_start = "Traceback (most recent call last)" in body
        if tb_start:
            st.in_tb = True
            st.tb_spec = False
            st.prev_src = ""
            if "hit an exception" not in body:
                return
        elif st.in_tb and indented:
            if body.startswith("File "):
                if "speculative" in body or "eagle" in body or "draft" in body:
                    st.tb_spec = True
            else:
                st.prev_src = body[:500]
            return

        in_tb = st.in_tb
        if in_tb and not tb_start and not body.startswith(("During handling", "The above exception")):
            st.in_tb = False

        if _PROGRESS.search(body):
            _progress(st)
            return
        if body.startswith(_BENIGN) or body.startswith(_UVICORN_QUIET) or level in _QUIET_LEVELS:
            return
        if _PYWARN.match(body):
            return
        if body.startswith("usage:"):
            st.usage_seen = True
            return

        low = body.lower()
        if not any(k in low for k in _INTEREST):
            return
        _match_fatal(st, raw, body, in_tb)


# ---------------------------------------------------------------- line helpers

def _ready(st: _State, raw: str, *, explicit: bool) -> None:
    if explicit and not st.ready_explicit:
        st.ready_explicit = True
        st.ready_line = raw
        _reset(st)
    elif st.ready_line is None:
        st.ready_line = raw
        _reset(st)


def _serving(st: _State, raw: str) -> None:
    if st.ready_line is None:
        _ready(st, raw, explicit=False)
    else:
        _progress(st)


def _reset(st: _State) -> None:
    """The server became ready: what happened before did not kill it."""
    st.fresh.clear()
    st.demoted.clear()
    st.fresh_strong = st.fresh_crash = False
    st.terminal = st.terminal_real = False
    st.in_tb = False


def _progress(st: _State) -> None:
    """A normal line: earlier candidates did not stop the server (yet)."""
    if st.fresh:
        for cause, c in st.fresh.items():
            if _better(st.demoted.get(cause), c):
                st.demoted[cause] = c
        st.fresh.clear()
    st.fresh_strong = st.fresh_crash = False


def _add(st: _State, cand: _Cand, *, crash: bool = False, terminal: bool = False) -> None:
    if _better(st.fresh.get(cand.cause), cand):
        st.fresh[cand.cause] = cand
    if cand.score >= 50 and cand.cause not in ("other", "signal_killed"):
        st.fresh_strong = True
    if crash:
        st.fresh_crash = True
    if terminal:
        st.terminal = True
        if not cand.stop_induced:
            st.terminal_real = True


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _parse_batch(st: _State, body: str, decode: bool) -> None:
    m = st.metrics
    if (x := _M_RUNNING.search(body)) is not None:
        m["running_req"] = int(x.group(1))
    if (x := _M_QUEUE.search(body)) is not None:
        m["queue_req"] = int(x.group(1))
    usage: dict[str | None, float] = {}
    for x in _M_TOKEN_USAGE.finditer(body):
        v = _num(x.group(2))
        if v is not None:
            usage.setdefault(x.group(1), v)
    for k in (None, "full", "swa"):
        if k in usage:
            m["token_usage"] = usage[k]
            break
    if decode:
        if (x := _M_GEN.search(body)) is not None and (v := _num(x.group(1))) is not None:
            m["gen_throughput"] = v
        if (x := _M_ACCEPT.search(body)) is not None and (v := _num(x.group(1))) is not None:
            m["accept_len"] = v


def _parse_vllm(st: _State, body: str) -> bool:
    m = st.metrics
    found = False
    if (x := _V_GEN.search(body)) is not None and (v := _num(x.group(1))) is not None:
        m["gen_throughput"] = v
        found = True
        if (x := _V_RUNNING.search(body)) is not None:
            m["running_req"] = int(x.group(1))
        if (x := _V_QUEUE.search(body)) is not None:
            m["queue_req"] = int(x.group(1))
        if (x := _V_USAGE.search(body)) is not None and (v := _num(x.group(1))) is not None:
            m["token_usage"] = round(v / 100.0, 6)
    if (x := _V_ACCEPT.search(body)) is not None and (v := _num(x.group(1))) is not None:
        m["accept_len"] = v
        found = True
    return found


def _match_fatal(st: _State, raw: str, body: str, in_tb: bool) -> None:
    seq = st.seq
    exc = _EXC.match(body)
    exc_name = exc.group(1) if exc else None
    if exc_name and exc_name.rsplit(".", 1)[-1] in _EXC_IGNORED:
        return

    # SGLang's "child died" lines carry an exit code: negative means a signal.
    m = _RANK_DIED.search(body) or _CHILD_CRASH.search(body)
    if m:
        code = int(m.group(2))
        if code < 0:
            cand = _Cand("signal_killed", 30, seq, raw, "child_signal", stop_induced=True, detail=str(code))
        else:
            cand = _Cand("other", 12, seq, raw, "child_exit", detail=str(code))
        _add(st, cand, terminal=True)
        return

    best: _Rule | None = None
    for rule in _RULES:
        if rule.exception_only and not exc_name:
            continue
        if (best is None or rule.score > best.score) and rule.rx.search(body):
            best = rule
    if best is None and st.usage_seen and ": error: " in body:
        best = _RULES_BY_NAME["argparse"]
    if best is None and exc_name:
        short = exc_name.rsplit(".", 1)[-1]
        if short == "AssertionError" and (st.tb_spec or _SPEC_WORDS.search(st.prev_src)):
            best = _RULES_BY_NAME["spec"]
        elif in_tb and st.tb_spec:
            best = _RULES_BY_NAME["spec"]
    if exc_name and body == exc_name and st.prev_src:
        raw = st.prev_src  # a bare ``AssertionError``: the source line above says more
    if best is not None:
        cand = _Cand(best.cause, best.score, seq, raw, best.name, best.stop_induced, _detail(best, body))
        _add(st, cand, crash=best.crash or (best.terminal and not best.stop_induced), terminal=best.terminal)
        return
    if exc_name:
        # A bare exception ending a traceback: the cause is unknown but the line is the best we have.
        _add(st, _Cand("other", 20 if in_tb else 15, seq, raw, "exception"))


_FLAG = re.compile(r"(--[\w-]+)")
_PORT = re.compile(r"\(\s*'[^']*',\s*(\d+)\s*\)|[Pp]ort[ =:]+(\d+)|:(\d{2,5})\b")
_MODULE = re.compile(r"No module named '([^']+)'|cannot import name '([^']+)'")
_AMBIG = re.compile(r"ambiguous option: (--[\w-]+) could match (.*)")


def _detail(rule: _Rule, body: str) -> str | None:
    if rule.cause == "bad_flags":
        m = _AMBIG.search(body)
        if m:
            return f"{m.group(1)}|{m.group(2).strip()}"
        m = _FLAG.search(body.split(": error: ", 1)[-1])
        return m.group(1) if m else None
    if rule.cause == "port_in_use":
        m = _PORT.search(body)
        if m:
            return next(g for g in m.groups() if g)
        return None
    if rule.cause == "import_error":
        m = _MODULE.search(body)
        if m:
            return next(g for g in m.groups() if g)
    if rule.name == "kv_pool":
        m = re.search(r"mem_fraction_static=([\d.]+)", body)
        return m.group(1) if m else None
    return None


# ---------------------------------------------------------------- decision

_KNOWN_RENAMES = {"--mamba-scheduler-strategy": "--mamba-radix-cache-strategy"}


def _best(st: _State, *, ignore_stop_induced: bool = False, fresh_only: bool = False) -> _Cand | None:
    best: _Cand | None = None
    best_eff = -1
    groups = ((st.fresh, _FRESH_BONUS),) if fresh_only else ((st.fresh, _FRESH_BONUS), (st.demoted, 0))
    for group, bonus in groups:
        for c in group.values():
            if ignore_stop_induced and c.stop_induced:
                continue
            eff = c.score + bonus
            if eff > best_eff or (eff == best_eff and best is not None and c.seq < best.seq):
                best, best_eff = c, eff
    return best


def _is_specific(c: _Cand | None) -> bool:
    return c is not None and c.cause not in ("other", "signal_killed")


def _signal_of(exit: ExitRecord) -> int | None:
    if exit.signal:
        return exit.signal
    code = exit.exit_code
    if code is not None and code < 0:
        return -code
    if code is not None and 128 < code <= 128 + 64:
        return code - 128
    return None


def _signame(n: int) -> str:
    try:
        return _signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _metrics(st: _State) -> ServeMetrics | None:
    return ServeMetrics(**st.metrics) if st.metrics else None


def _failed(st: _State, c: _Cand | None, cause: FailureCause, exit: ExitRecord | None,
            hint: str | None = None, line: str | None = None) -> Classification:
    text = line if line is not None else (c.line if c is not None else st.last_line)
    return Classification(
        state="failed",
        cause=cause,
        line=_clean(text) if text else None,
        hint=hint or _hint(cause, c, exit, st),
        metrics=_metrics(st),
    )


def _decide(st: _State, exit: ExitRecord | None) -> Classification:
    ready = st.ready_line is not None
    operator = exit is not None and exit.stopped_by_operator

    if exit is not None and exit.error and not operator:
        c = _classify_exec_error(exit.error)
        return _failed(st, c, c.cause if c else "other", exit, line=exit.error)

    if operator:
        log_failed = st.terminal_real or (st.fresh_crash if ready else st.fresh_strong)
        best = _best(st, ignore_stop_induced=True)
        if log_failed and best is not None:
            return _failed(st, best, best.cause, exit)
        return _alive(st, ready)

    log_failed = st.terminal or (st.fresh_crash if ready else st.fresh_strong)
    best = _best(st)
    if exit is None:
        if log_failed:
            return _failed(st, best, best.cause if best else "other", None)
        return _alive(st, ready)

    # The process ended on its own: failed, whatever the log says. After ready, lines that
    # serving went on after are not what ended it.
    sig = _signal_of(exit)
    if ready:
        best = _best(st, fresh_only=True)
    if log_failed and best is not None:
        if exit.host_oom_killed and (
            best.cause == "signal_killed" or (best.cause == "other" and (sig is not None or best.rule != "exception"))
        ):
            return _failed(st, best, "host_oom_killed", exit)
        return _failed(st, best, best.cause, exit)
    if _is_specific(best):
        return _failed(st, best, best.cause, exit)
    if exit.host_oom_killed:
        return _failed(st, best, "host_oom_killed", exit)
    if sig is not None:
        return _failed(st, best, "signal_killed", exit)
    if best is not None:
        return _failed(st, best, best.cause, exit)
    code = exit.exit_code
    when = "after it was ready" if ready else "before it was ready"
    if st.sigterm_line is not None:
        return _failed(st, None, "other", exit, line=st.sigterm_line,
                       hint=f"the server got SIGTERM from outside mtpconsole and exited (code {code}) {when}")
    hint = f"the server exited with code {code} {when}"
    if code == 2 and not ready:
        hint += "; exit code 2 usually means its argument parser rejected the command line"
    hint += "; read the end of the log"
    return _failed(st, None, "other", exit, hint=hint)


def _alive(st: _State, ready: bool) -> Classification:
    if ready:
        return Classification(state="ready", line=_clean(st.ready_line or ""), metrics=_metrics(st))
    return Classification(state="loading", metrics=_metrics(st))


def _classify_exec_error(text: str) -> _Cand | None:
    st = _State()
    for i, line in enumerate(text.splitlines() or [text]):
        st.seq = i + 1
        body = line.strip()
        if body:
            _match_fatal(st, line, body, False)
    return _best(st)


# ---------------------------------------------------------------- hints

def _hint(cause: FailureCause, c: _Cand | None, exit: ExitRecord | None, st: _State) -> str:
    rule = c.rule if c else None
    detail = c.detail if c else None
    orphans = "check for orphaned sglang:: processes still holding GPU memory from an earlier server"
    if cause == "gpu_oom":
        if st.vllm_style and not st.sglang_style:
            return ("GPU memory ran out: lower --max-model-len or --max-num-seqs, adjust "
                    "--gpu-memory-utilization; check for leftover VLLM:: processes holding GPU memory")
        if rule == "kv_pool":
            cur = f" (now {detail})" if detail else ""
            return ("no GPU memory left for the KV cache after the weights and Mamba/speculative buffers: "
                    f"{orphans}; lower --max-running-requests or --context-length, or raise "
                    f"--mem-fraction-static{cur} only if the GPU has headroom")
        if rule == "graph_oom":
            return ("CUDA graph capture ran out of memory: lower --mem-fraction-static or "
                    f"--cuda-graph-max-bs-decode (or --disable-cuda-graph); {orphans}")
        if rule == "runtime_oom":
            return ("the KV cache ran out while serving: lower --max-running-requests or --context-length, "
                    "or raise --mem-fraction-static if the GPU has headroom")
        return ("GPU out of memory: lower --mem-fraction-static, --max-running-requests or --context-length; "
                f"{orphans}")
    if cause == "host_oom_killed":
        counts = ""
        if exit is not None and exit.oom_kill_before is not None and exit.oom_kill_after is not None:
            counts = f" ({exit.oom_kill_before} -> {exit.oom_kill_after})"
        return (f"the host's OOM killer ended the server: /proc/vmstat oom_kill rose{counts}; host RAM ran out "
                "- lower --hicache-size/--hicache-ratio, run fewer servers per host, check dmesg")
    if cause == "port_in_use":
        port = f" {detail}" if detail else ""
        return (f"port{port} is already taken (another server or an orphaned sglang:: process): "
                "stop it or choose another --port")
    if cause == "model_not_found":
        return ("the model was not found: check --model-path (a local directory needs config.json), the "
                "repo id's spelling, HF_TOKEN for gated repos, HF_HUB_OFFLINE and the HF cache")
    if cause == "import_error":
        mod = f" ({detail})" if detail else ""
        return (f"the server's Python environment is broken{mod}: install the missing package in that "
                "environment or align sglang / sgl-kernel / flashinfer / torch versions")
    if cause == "nccl_error":
        return ("multi-GPU communication failed: check CUDA_VISIBLE_DEVICES and --tp-size, stale processes "
                "on those GPUs, /dev/shm size in containers; retry with NCCL_DEBUG=INFO or NCCL_P2P_DISABLE=1")
    if cause == "bad_flags":
        if detail and "|" in detail:
            flag, options = detail.split("|", 1)
            return (f"argparse rejected the ambiguous abbreviation {flag} (could be {options}): spell the full "
                    "flag; flag names drift between releases - check the host's own flags (mtpconsole flags)")
        flag = detail or "a flag"
        renamed = f" (renamed {_KNOWN_RENAMES[detail]})" if detail in _KNOWN_RENAMES else ""
        return (f"argparse rejected {flag}{renamed}: flag names drift between releases - check the host's "
                "own flags (mtpconsole flags / mtpconsole check)")
    if cause == "cuda_driver":
        if rule == "cuda_error":
            return ("a CUDA error stopped the server: check nvidia-smi and dmesg (Xid), the driver vs the torch "
                    "CUDA build; for illegal memory access retry with --disable-cuda-graph or another "
                    "--attention-backend")
        return ("CUDA is not usable: check nvidia-smi, CUDA_VISIBLE_DEVICES and that the driver is new "
                "enough for the torch CUDA build")
    if cause == "spec_decode_error":
        return ("speculative decoding failed to set up: check --speculative-algorithm, set "
                "--speculative-num-steps with --speculative-eagle-topk / --speculative-num-draft-tokens, the "
                "draft model path, and that this model supports the algorithm")
    if cause == "signal_killed":
        sig = None
        if c is not None and c.rule == "child_signal" and detail and detail.lstrip("-").isdigit():
            sig = abs(int(detail))  # the scheduler's own signal, not the launcher's exit
        elif exit is not None:
            sig = _signal_of(exit)
        what = _signame(sig) if sig else "a signal"
        if sig not in (None, _signal.SIGKILL):
            return (f"ended by {what} with no cause in the log: something outside mtpconsole sent it "
                    "(another operator, a job scheduler, systemd)")
        if exit is not None and exit.oom_kill_before is not None and exit.oom_kill_after is not None:
            oom = "/proc/vmstat oom_kill did not rise, so not the host OOM killer"
        else:
            oom = "often the host OOM killer (compare /proc/vmstat oom_kill, check dmesg)"
        return f"killed by {what} with no cause in the log: {oom}; otherwise someone or a watchdog killed it"
    if rule == "warmup":
        return ("the warmup request failed: often an HTTP proxy intercepting 127.0.0.1 - set "
                "NO_PROXY=127.0.0.1,localhost for the server")
    if rule == "child_exit" and detail:
        return f"a server subprocess exited with code {detail}: read the lines above it in the log"
    return "the server failed: read the decisive line and the log around it"


# ---------------------------------------------------------------- entry points

def classify(text: str, exit: ExitRecord | None = None) -> Classification:
    """Classify a whole log text (plus the optional exit record). Pure; linear in the text."""
    clf = LogClassifier()
    clf.feed(text)
    return clf.result(exit)


_MARKERS = (_READY.encode(), _APP_STARTUP.encode())


def _read_at(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    return f.read(size)


def classify_file(path: str | os.PathLike[str], exit: ExitRecord | None = None, *,
                  tail_bytes: int = TAIL_BYTES, head_scan_bytes: int = HEAD_SCAN_BYTES) -> Classification:
    """Classify a log file without loading it whole.

    Files up to ``tail_bytes`` are classified entirely. Bigger ones: the first 64 KiB (the
    startup banner), the ready line if it is within the first ``head_scan_bytes`` (a byte
    search, not a parse), then the last ``tail_bytes``. Raises ``OSError`` when unreadable.
    """
    clf = LogClassifier()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size <= tail_bytes:
            while chunk := f.read(1 << 20):
                clf.feed_bytes(chunk)
            return clf.result(exit)
        tail_start = size - tail_bytes
        head = _read_at(f, 0, min(64 * 1024, tail_start))
        cut = head.rfind(b"\n")
        clf.feed_bytes(head[: cut + 1] if cut >= 0 else b"")
        clf.gap()
        ready_line = _scan_for_ready(f, min(head_scan_bytes, tail_start))
        if ready_line:
            clf.feed_bytes(ready_line + b"\n")
            clf.gap()
        tail = _read_at(f, tail_start, tail_bytes)
        nl = tail.find(b"\n")
        clf.feed_bytes(tail[nl + 1:] if nl >= 0 else b"")
        return clf.result(exit)


def _scan_for_ready(f: BinaryIO, limit: int) -> bytes | None:
    """The ready line in the first ``limit`` bytes, found by byte search.

    SGLang's own ready line wins; uvicorn's ``Application startup complete`` (vLLM's ready
    line, but only a step on SGLang's way) is returned only when there is none.
    """
    block = 1 << 20
    overlap = max(len(m) for m in _MARKERS)
    offset = 0
    fallback: bytes | None = None
    while offset < limit:
        data = _read_at(f, offset, min(block + overlap, limit - offset))
        if not data:
            break
        for marker in _MARKERS:
            i = data.find(marker)
            if i < 0:
                continue
            start = data.rfind(b"\n", 0, i) + 1
            end = data.find(b"\n", i)
            line = data[start: end if end >= 0 else len(data)][: MAX_RETURNED_LINE * 4]
            if marker is _MARKERS[0]:
                return line
            if fallback is None:
                fallback = line
        offset += block
    return fallback
