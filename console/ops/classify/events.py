"""Lines -> events: ready, serving, progress, stop, metrics and *failures*.

A failure is one event however many lines it takes: the line that announces it
(``Scheduler hit an exception: Traceback ...``, ``EngineCore failed to start.``), the traceback
it introduces (frames are context: they only tell *where*, e.g. inside CUDA-graph capture or the
speculative path), the exception line(s) of a chain, and the message lines that follow an
exception (``Cannot access gated repo ...``). :class:`Reader` assembles that episode and hands
one :class:`Failure` to its :class:`Sink` when the episode ends (or, for a log that stops in the
middle of one, when a result is asked for). Memory is bounded: an episode keeps its best
candidate, its first and last exception and a few flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from console.model import FailureCause
from console.ops.classify.lines import QUIET_LEVELS, Line, read_line
from console.ops.classify.patterns import (
    ANY_CAUSE,
    ARGPARSE_ERROR,
    BENIGN,
    CAUSES,
    CAUSES_BY_NAME,
    CHAIN,
    CHILD_CRASH,
    CUT_WHERE,
    EXCEPTION,
    EXIT_CODE,
    FRAME_FLAGS,
    HTTP,
    IGNORED_EXCEPTIONS,
    KEYWORDS,
    PROGRESS_ANY,
    RANK_DIED,
    READY_GATE,
    SERVING_GATE,
    SGLANG,
    SPEC_PROGRESS,
    STOP_ANY,
    STOP_EXCEPTIONS,
    STOP_GATE,
    TRACEBACK,
    USAGE_START,
    VLLM,
    Cause,
)

MAX_CONTINUATION = 12
"""Message lines after an exception that still belong to it."""


@dataclass(slots=True)
class Failure:
    """One failure event, with the line that best names it."""

    cause: FailureCause
    score: int
    seq: int
    line: str
    rule: str
    crash: bool = False
    """Fatal even after ready (not a handled request error)."""
    terminal: bool = False
    """Shows the process going down."""
    stop_induced: bool = False
    """What an operator's stop also produces (no proof of a crash by itself)."""
    detail: str | None = None
    """The body of the decisive line (the hint reads a flag, a port, a module from it)."""


class Sink(Protocol):
    """What receives the events (``rules.State``)."""

    def seen(self, line: Line) -> None: ...
    def is_sglang(self) -> bool: ...
    def ready(self, raw: str, explicit: bool) -> None: ...
    def serving(self, raw: str) -> None: ...
    def progress(self) -> None: ...
    def stop(self, raw: str, seq: int, sigterm: bool) -> None: ...
    def failure(self, f: Failure) -> None: ...
    def metric(self, name: str, value: float) -> None: ...


def _causes(body: str, exception: bool) -> tuple[Cause, ...]:
    low = body.lower()
    if not any(k in low for k in KEYWORDS) or ANY_CAUSE.search(body) is None:
        return ()
    return tuple(c for c in CAUSES if (exception or not c.exception_only) and c.rx.search(body))


def _best(causes: tuple[Cause, ...]) -> Cause | None:
    return max(causes, key=lambda c: c.score) if causes else None


@dataclass(slots=True)
class _Episode:
    """A failure being assembled (bounded)."""

    seq: int
    header: str | None = None
    announce: tuple[Cause, str, str] | None = None
    best: tuple[Cause, str, str, int] | None = None
    """(cause, raw line, body, seq) of the most specific line so far."""
    flags: set[str] = field(default_factory=set)
    last_src: str = ""
    first_exc: tuple[str, str, str] | None = None
    last_exc: tuple[str, str, str] | None = None
    """(raw, body, exception name)."""
    stop_only: bool = True
    """Every exception so far is a stop (KeyboardInterrupt) or ignorable."""
    where: str | None = None
    """The cause the last frame or source line points at (see ``CUT_WHERE``)."""
    collecting: bool = True
    """Inside frames (True) or after an exception line, reading its message (False)."""
    continuation: int = 0

    def consider(self, raw: str, body: str, seq: int, exception: bool) -> None:
        c = _best(_causes(body, exception))
        if c is not None and (self.best is None or c.score > self.best[0].score):
            self.best = (c, raw, body, seq)

    def frame(self, raw: str, body: str, seq: int) -> None:
        if body[:1] not in ("^", "~", "|") and not body.startswith("..."):
            self.where = next((cause for cause, rx in CUT_WHERE if rx.search(body)), None) or (
                self.where if not body.startswith("File ") else None)
        if body.startswith("File "):
            low = body.lower()
            for name, rx in FRAME_FLAGS:
                if rx.search(low):
                    self.flags.add(name)
            return
        if body[:1] in ("^", "~", "|") or body.startswith("..."):
            return
        self.last_src = raw
        low = body.lower()
        for name, rx in FRAME_FLAGS:
            if name in ("spec", "kv_check") and rx.search(low):
                self.flags.add(name)
        if body.startswith("raise ") and self.last_exc is None:
            self.consider(raw, body, seq, False)  # a cut traceback: the raise statement names the error

    def exception(self, raw: str, body: str, name: str, seq: int) -> None:
        short = name.rsplit(".", 1)[-1].split("(", 1)[0]
        if short not in STOP_EXCEPTIONS and short not in IGNORED_EXCEPTIONS:
            self.stop_only = False
        entry = (raw, body, name)
        if self.first_exc is None:
            self.first_exc = entry
        self.last_exc = entry
        self.consider(raw, body, seq, True)
        self.collecting = False
        self.continuation = 0

    def to_failure(self) -> Failure | None:
        """The event this episode is (None: only ignorable exceptions or a Ctrl-C)."""
        ann = self.announce
        best = self.best
        if self.stop_only and ann is None and best is None and self.last_exc is not None:
            return None
        cause: FailureCause
        rule_crash = False
        if best is not None and best[0].cause != "other":
            rule = best[0]
            cause, score, line, detail, name = rule.cause, rule.score, best[1], best[2], rule.name
            if cause == "cuda_driver" and rule.name == "cuda_error" and "graph" in self.flags:
                cause, score = "cuda_graph", 86
            rule_crash = rule.crash
        else:
            line, detail = self._line()
            name = "exception" if self.last_exc is not None else ("announce" if ann else "traceback")
            if "spec" in self.flags:
                cause, score = "spec_decode_error", 70
            elif "graph" in self.flags:
                cause, score = "cuda_graph", 70
            elif "warmup" in self.flags:
                cause, score = "warmup_failed", 70  # the server's own warmup request failed
            elif "kv_check" in self.flags:
                cause, score = "gpu_oom", 60  # cut inside the KV-cache size check, which raises only that
            elif self.last_exc is None and self.where is not None:
                cause, score = self.where, 55  # type: ignore[assignment]  # cut where that step failed
            else:
                cause = "other"
                score = 20 if self.last_exc is not None else (16 if self.header else 15)
        terminal = (ann is not None and ann[0].terminal) or "engine" in self.flags
        crash = rule_crash or terminal or cause == "cuda_graph"
        if "request" in self.flags and "engine" not in self.flags and not rule_crash:
            crash = terminal = False
        return Failure(cause=cause, score=score, seq=self.seq, line=line, rule=name, crash=crash,
                       terminal=terminal, detail=detail)

    def _line(self) -> tuple[str, str]:
        if self.last_exc is not None:
            raw, body, name = self.last_exc
            if body == name and self.last_src:
                return self.last_src, self.last_src  # a bare ``AssertionError``: its source line says more
            return raw, body
        if self.announce is not None:
            return self.announce[1], self.announce[2]
        return self.header or "Traceback (most recent call last):", ""


class Reader:
    """Turns lines into events for a :class:`Sink`; bounded state, linear work."""

    def __init__(self) -> None:
        self.seq = 0
        self.ep: _Episode | None = None
        self.usage = False
        self.spec_step = False
        """The last start-up step was on the speculative path (loading the draft model ...)."""

    def copy(self) -> Reader:
        r = Reader()
        r.seq, r.usage, r.spec_step = self.seq, self.usage, self.spec_step
        if self.ep is not None:
            r.ep = replace(self.ep, flags=set(self.ep.flags))
        return r

    def reset(self) -> None:
        """A gap in the log: an open episode ends where the text stops."""
        self.ep = None

    def close(self, sink: Sink) -> None:
        if self.ep is not None:
            ep, self.ep = self.ep, None
            f = ep.to_failure()
            if f is not None:
                sink.failure(self._where(f))
            elif ep.last_exc is not None and ep.last_exc[2].rsplit(".", 1)[-1] in STOP_EXCEPTIONS:
                sink.stop(ep.last_exc[0], ep.seq, False)

    # ------------------------------------------------------------ one line

    def line(self, raw: str, sink: Sink) -> None:
        ln = read_line(raw)
        body = ln.body
        if not body:
            return
        self.seq += 1
        seq = self.seq
        sink.seen(ln)
        ep = self.ep
        if ep is not None and self._continues(ep, ln, body, seq):
            return
        if self.usage:
            if ARGPARSE_ERROR.match(body):
                self.usage = False
                self._emit(sink, Failure("bad_flags", 95, seq, ln.raw, "argparse", terminal=True, detail=body))
            return
        if USAGE_START.match(body):
            self.close(sink)
            self.usage = True
            return
        if ln.interrupt:
            self.close(sink)
            sink.stop(ln.raw, seq, False)
        quiet = ln.level in QUIET_LEVELS
        if ln.indented:
            if quiet:
                return
            if body.startswith('File "'):  # a traceback whose start is not in the log
                self.close(sink)
                self.ep = _Episode(seq=seq)
                self.ep.frame(ln.raw, body, seq)
            elif body.startswith("what():"):  # C++ terminate message
                self._failure_line(ln, body, seq, sink)
            return
        if not quiet and (body.startswith(TRACEBACK) or EXCEPTION.match(body)):
            self._failure_line(ln, body, seq, sink)
            return
        if self._normal(ln, body, seq, sink):
            return
        if BENIGN.search(body) or quiet or body.startswith(("frame #", "Exception raised from")):
            return
        self._failure_line(ln, body, seq, sink)

    def _continues(self, ep: _Episode, ln: Line, body: str, seq: int) -> bool:
        """The line belongs to the open episode (frame, chain, exception, message)."""
        if ep.collecting:
            if ln.indented:
                ep.frame(ln.raw, body, seq)
                return True
            if body.startswith(CHAIN):
                return True
            if body.startswith(TRACEBACK):
                ep.header = ep.header or ln.raw
                return True
            m = EXCEPTION.match(body)
            if m:
                ep.exception(ln.raw, body, m.group(1), seq)
                return True
            return False
        # after an exception line: chained tracebacks, remote frames, message lines
        if body.startswith(CHAIN):
            ep.collecting = True
            return True
        if ln.indented and body.startswith("File "):
            ep.collecting = True
            ep.frame(ln.raw, body, seq)
            return True
        if body.startswith(TRACEBACK) and ep.continuation <= 2:
            ep.collecting = True
            return True
        m = EXCEPTION.match(body)
        if m and ln.level not in QUIET_LEVELS:
            ep.exception(ln.raw, body, m.group(1), seq)
            return True
        if ep.continuation < MAX_CONTINUATION and not self._is_event(body) and not _announces(body):
            ep.continuation += 1
            if ln.level not in QUIET_LEVELS:
                ep.consider(ln.raw, body, seq, False)
            return True
        return False

    @staticmethod
    def _is_event(body: str) -> bool:
        return any(fw.ready.search(body) or fw.serving.search(body) for fw in (SGLANG, VLLM)) or bool(
            PROGRESS_ANY.search(body) or STOP_ANY.search(body) or HTTP.search(body))

    def _emit(self, sink: Sink, f: Failure) -> None:
        self.close(sink)
        sink.failure(self._where(f))

    def _where(self, f: Failure) -> Failure:
        """A generic failure right after a speculative start-up step is a speculative failure."""
        if self.spec_step and f.cause == "other" and f.rule not in ("child_exit", "sigquit", "killed"):
            return replace(f, cause="spec_decode_error", score=max(f.score, 60))
        return f

    def _normal(self, ln: Line, body: str, seq: int, sink: Sink) -> bool:
        """Ready, serving, metrics, progress and stop lines; True when the line was one.

        Substring gates keep the common lines (batch, HTTP, errors) to one or two regex scans.
        """
        if any(g in body for g in SERVING_GATE):
            for fw in (SGLANG, VLLM):
                if fw.serving.search(body):
                    self.close(sink)
                    self.spec_step = False
                    if fw.metrics_line.search(body):
                        self._metrics(fw.metrics, body, sink, decode="Prefill batch" not in body)
                    sink.serving(ln.raw)
                    return True
        if "HTTP/" in body:
            m = HTTP.search(body)
            if m is not None:
                if m.group(3) == "200" and (m.group(1) == "POST" or m.group(2).startswith(("/health", "/ready"))):
                    self.close(sink)
                    sink.serving(ln.raw)
                return True
        if any(g in body for g in READY_GATE):
            if SGLANG.ready.search(body):
                self.close(sink)
                self.spec_step = False
                sink.ready(ln.raw, True)
                return True
            if VLLM.ready.search(body):
                self.close(sink)
                if SGLANG.progress.search(body) and sink.is_sglang():
                    sink.progress()  # SGLang: uvicorn is up, its warmup is still to come
                else:
                    sink.ready(ln.raw, True)
                return True
        if "Mean acceptance length" in body:
            self._metrics(VLLM.metrics, body, sink, decode=True)
            return True
        if any(g in body for g in STOP_GATE) and STOP_ANY.search(body):
            self.close(sink)
            sink.stop(ln.raw, seq, "SIGTERM" in body or "signum=15" in body)
            return True
        if PROGRESS_ANY.search(body):
            self.close(sink)
            self.spec_step = SPEC_PROGRESS.search(body) is not None
            sink.progress()
            return True
        return False

    @staticmethod
    def _metrics(metrics: tuple, body: str, sink: Sink, decode: bool) -> None:
        for m in metrics:
            if m.field in ("gen_throughput", "accept_len") and not decode:
                continue
            x = m.rx.search(body)
            if x is None:
                continue
            try:
                v = float(x.group(1)) * m.scale
            except ValueError:
                continue
            sink.metric(m.field, int(v) if m.integer else round(v, 6))

    def _failure_line(self, ln: Line, body: str, seq: int, sink: Sink) -> None:
        if TRACEBACK in body:
            self.close(sink)
            ep = _Episode(seq=seq, header=ln.raw)
            head = body.split(TRACEBACK, 1)[0]
            if head.strip():
                _announce_into(ep, ln.raw, head, _causes(head, False))
            self.ep = ep
            return
        m = EXCEPTION.match(body)
        if m is not None:
            name = m.group(1)
            short = name.rsplit(".", 1)[-1].split("(", 1)[0]
            if short in IGNORED_EXCEPTIONS:
                return
            if short in STOP_EXCEPTIONS:
                self.close(sink)
                sink.stop(ln.raw, seq, False)
                return
            self.close(sink)
            ep = _Episode(seq=seq)
            ep.exception(ln.raw, body, name, seq)
            self.ep = ep
            return
        crash = CHILD_CRASH.search(body) or RANK_DIED.search(body) or EXIT_CODE.match(body)
        if crash is not None:
            code = int(crash.group(2))
            if code < 0:
                f = Failure("signal_killed", 30, seq, ln.raw, "child_signal", terminal=True, stop_induced=True,
                            detail=str(code))
            else:
                f = Failure("other", 12, seq, ln.raw, "child_exit", terminal=True, detail=str(code))
            self._emit(sink, f)
            return
        causes = _causes(body, False)
        if not causes:
            return
        best = _best(causes)
        assert best is not None
        if any(c.announce for c in causes):
            self.close(sink)
            ep = _Episode(seq=seq)
            _announce_into(ep, ln.raw, body, causes)
            self.ep = ep
            return
        self._emit(sink, Failure(best.cause, best.score, seq, ln.raw, best.name,
                                 crash=best.crash or (best.terminal and not best.stop_induced),
                                 terminal=best.terminal, stop_induced=best.stop_induced, detail=body))


def _announce_into(ep: _Episode, raw: str, head: str, causes: tuple[Cause, ...]) -> None:
    ep.announce = (next((c for c in causes if c.announce), CAUSES_BY_NAME["hit_exception"]), raw, head)
    specific = _best(tuple(c for c in causes if c.cause != "other"))
    if specific is not None:
        ep.best = (specific, raw, head, ep.seq)


def _announces(body: str) -> bool:
    return TRACEBACK in body or bool(ARGPARSE_ERROR.match(body)) or any(
        c.terminal and c.rx.search(body) for c in CAUSES if c.cause == "other")
