"""One failure event under construction: the announcing line, the traceback it introduces, its
exception line(s) and message lines, assembled into a single :class:`Failure`.

Frames are context, never the decisive line: they only say *where* the failure happened (inside
CUDA-graph capture, the speculative path, the KV-cache check, the warmup request, an import, a
distributed group's initialisation), which decides the cause when the exception itself is generic
or was cut off.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from console.core.classify.patterns import (
    ANNOUNCED_STEP,
    CAUSES,
    CAUSES_BY_NAME,
    CONNECTION_EXCEPTIONS,
    CUT_WHERE,
    FRAME_FLAGS,
    GUESSED_FROM_FRAMES,
    IGNORED_EXCEPTIONS,
    KEYWORDS,
    REQUEST_REFUSED,
    RESPONSE_EXCEPTIONS,
    STEP_CAUSES,
    STOP_EXCEPTIONS,
    WRAPPED_FRAME_TAIL,
    Cause,
)
from console.model import FailureCause


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
    phase: FailureCause | None = None
    """What the start-up step the failure happened in shows (``patterns.PHASES``, not a guess)."""
    guess: FailureCause | None = None
    """For a failure cut before its exception line: what failures where it stopped usually are (a guess, for
    the hint only; the cause stays ``other``)."""
    request: bool = False
    """A request handler's error (its frames are the HTTP server's, not the engine's): the server was serving."""
    tag: str | None = None
    """The process tag of the failure's first line (``lines.Line.tag``): failures of one process share it."""


FOLLOW_UP_SCORE = 13
"""An exception that only reports another process's death (``EngineDeadError``, ``Engine core initialization
failed. See root cause above``): below a cut traceback (15/16), above a bare native crash line (12)."""


_SEEN: dict[tuple[str, bool], tuple[Cause, ...]] = {}
"""Causes of recent short lines: logs repeat the same failure line on every rank and every retry."""
_SEEN_MAX = 1024
_SEEN_LINE = 512


def causes_of(body: str, exception: bool) -> tuple[Cause, ...]:
    """The cause families whose pattern the line matches (``exception``: it is an exception line)."""
    low = body.lower()
    if not any(k in low for k in KEYWORDS):
        return ()
    short = len(body) <= _SEEN_LINE
    if short:
        hit = _SEEN.get((body, exception))
        if hit is not None:
            return hit
    found = tuple(c for c in CAUSES if (exception or not c.exception_only) and c.rx.search(body))
    if short:
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()  # bounded: a log of ever-new lines only loses the shortcut
        _SEEN[(body, exception)] = found
    return found


def best_of(causes: tuple[Cause, ...]) -> Cause | None:
    return max(causes, key=lambda c: c.score) if causes else None


@dataclass(slots=True)
class Episode:
    """A failure being assembled (bounded)."""

    seq: int
    header: str | None = None
    announce: tuple[Cause, str, str] | None = None
    best: tuple[Cause, str, str, int] | None = None
    """(cause, raw line, body, seq) of the most specific line so far."""
    best_weak: bool = False
    """``best`` is a stand-in (a ``raise`` source line, an exception with no message, the announcing
    line): a later exception or message line of the same cause says it better."""
    flags: set[str] = field(default_factory=set)
    last_src: str = ""
    first_exc: tuple[str, str, str] | None = None
    last_exc: tuple[str, str, str] | None = None
    """(raw, body, exception name)."""
    exc_tag: str | None = None
    """The process tag of the last exception line (``lines.Line.tag``)."""
    stop_only: bool = True
    """Every exception so far is a stop (KeyboardInterrupt) or ignorable."""
    where: FailureCause | None = None
    """The cause the last frame or source line points at (see ``CUT_WHERE``)."""
    step: FailureCause | None = None
    """The cause the step named by the announcing line points at (see ``STEP_CAUSES``)."""
    after_frame: bool = False
    """The last line was a ``File ...`` frame (its source line comes next, indented or not)."""
    collecting: bool = True
    """Inside frames (True) or after an exception line, reading its message (False)."""
    continuation: int = 0
    tag: str | None = None
    """The process tag of the announcing line (``(Worker_TP0 pid=1)``), when it had one."""
    message: tuple[str, str] | None = None
    """(raw, body) of the message line under a generic header exception (pydantic's ``Value error, ...``)."""
    header_tag: str | None = None
    """The process tag of the ``Traceback`` header that opened the episode."""
    ignored: bool = False
    """The traceback follows Python's ``Exception ignored in ...``: it reports an exception that nothing raised on."""

    def consider(self, raw: str, body: str, seq: int, exception: bool, *, weak: bool = False) -> None:
        c = best_of(causes_of(body, exception))
        if c is not None and (self.best is None or c.score > self.best[0].score
                              or (self.best_weak and not weak and c.score == self.best[0].score)):
            self.best = (c, raw, body, seq)
            self.best_weak = weak or (exception and _bare(body))

    def frame(self, raw: str, body: str, seq: int) -> None:
        if not body.startswith("File ") and WRAPPED_FRAME_TAIL.match(body):
            body = "File " + body  # a frame line wrapped at the terminal's width: the frame goes on
        self.after_frame = body.startswith("File ")
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
            self.consider(raw, body, seq, False, weak=True)  # a cut traceback: the raise statement names the error

    def exception(self, raw: str, body: str, name: str, seq: int, tag: str | None = None) -> None:
        self.exc_tag = tag
        short = name.rsplit(".", 1)[-1].split("(", 1)[0]
        if short not in STOP_EXCEPTIONS and short not in IGNORED_EXCEPTIONS:
            self.stop_only = False
        if short in RESPONSE_EXCEPTIONS:
            self.flags.add("request")  # raised to answer a request with an error status: a request's error
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
            if ann is not None and best[1] == ann[1] and self.last_exc is not None:
                line, detail = self._line()  # the announcing line names the cause, its exception says what
            rule_crash = rule.crash
        else:
            line, detail = self._line()
            name = "exception" if self.last_exc is not None else ("announce" if ann else "traceback")
            if best is not None and best[0].name == "going_down" and self.last_exc is not None and \
                    best[2] == self.last_exc[1]:
                # the exception reports a child's end (a wrapper's "Server process exited with code N"): its frames
                # are the reporter's (a launch script, a test helper), not the failure's
                self.flags -= REPORTER_BLIND_FLAGS
            if "spec" in self.flags:
                cause, score = "spec_decode_error", 70
            elif "graph" in self.flags:
                cause, score = "cuda_graph", 70
            elif "warmup" in self.flags:
                cause, score = "warmup_failed", 70  # the server's own warmup request failed
            elif "args" in self.flags and self.last_exc is not None:
                cause, score = "bad_flags", 60  # raised while the command line was parsed: the flags are refused
            elif "kv_check" in self.flags:
                cause, score = "gpu_oom", 60  # cut inside the KV-cache size check, which raises only that
            elif "dist" in self.flags and self.last_exc is not None and \
                    self.last_exc[2].rsplit(".", 1)[-1] in CONNECTION_EXCEPTIONS:
                cause, score = "nccl_error", 60  # a socket between ranks (c10d store, gloo) dropped
            elif self.last_exc is None and (shown := self._shown(self.where)) is not None:
                cause, score = shown, 55  # cut where that step failed
            elif self.last_exc is None and (shown := self._shown(self.step)) is not None:
                cause, score = shown, 55  # cut in the step the launcher named
            else:
                cause = "other"
                # a traceback header adds to a bare cut, not to a process's announcing line: of several processes
                # announcing the same failure (their lines interleaved), the first decides
                headed = self.header is not None and (ann is None or self.tag is None)
                score = 20 if self.last_exc is not None else (16 if headed else 15)
                if self.last_exc is not None and follow_up(self.last_exc[1]) and (
                        self.first_exc is None or follow_up(self.first_exc[1])):
                    score = FOLLOW_UP_SCORE  # "see the root cause above": the earlier, even cut, traceback says more
                if best is not None and best[0].names_line:
                    line, detail = best[1], best[2]  # no table cause, but this line names what failed
        terminal = (ann is not None and ann[0].terminal) or "engine" in self.flags
        crash = rule_crash or terminal or cause == "cuda_graph"
        refused = self.last_exc is not None and REQUEST_REFUSED.search(self.last_exc[1]) is not None
        request = (("request" in self.flags or refused) and "engine" not in self.flags and "lifespan" not in self.flags
                   and not rule_crash)
        if request:
            crash = terminal = False
        # a request handler's error that reports no going down (``EngineDeadError``) shows a serving server
        served = request and not (best is not None and best[0].terminal)
        guess = (self.where or self.step) if cause == "other" and self.last_exc is None else None
        return Failure(cause=cause, score=score, seq=self.seq, line=line, rule=name, crash=crash,
                       terminal=terminal, detail=detail, request=served, guess=guess,
                       tag=self.tag if self.tag is not None else self.header_tag)

    @staticmethod
    def _shown(cause: FailureCause | None) -> FailureCause | None:
        """``cause`` when the frames show it, None when they only suggest it (``GUESSED_FROM_FRAMES``)."""
        return None if cause is None or cause in GUESSED_FROM_FRAMES else cause

    def _line(self) -> tuple[str, str]:
        if self.last_exc is not None:
            raw, body, name = self.last_exc
            if self.first_exc is not None and follow_up(body) and not follow_up(self.first_exc[1]):
                raw, body, name = self.first_exc  # a chain ending in "see the root cause above": the root says more
            if self.message is not None and body == self.last_exc[1]:
                return self.message  # the header's message line says what is wrong
            if body == name and self.last_src and self.last_src.lstrip().startswith(("assert ", "raise ")):
                return self.last_src, self.last_src  # a bare ``AssertionError``: its ``assert`` line says more
            return raw, body
        if self.announce is not None:
            return self.announce[1], self.announce[2]
        return self.header or "Traceback (most recent call last):", ""


REPORTER_BLIND_FLAGS = frozenset({"spec", "graph", "warmup", "kv_check", "dist", "args"})
"""Frame flags that say what failed: meaningless in the frames of a process that only reports another's end."""


def follow_up(body: str) -> bool:
    """The exception only reports another failure (``EngineDeadError``, ``See root cause above``)."""
    return any(c.follow_up and c.rx.search(body) for c in FOLLOW_UPS)


FOLLOW_UPS = tuple(c for c in CAUSES if c.follow_up)


def _bare(body: str) -> bool:
    """An exception line with no message (``ImportError:``): the lines after it say what happened."""
    name, _, rest = body.partition(":")
    return not rest.strip() and " " not in name


def announce_into(ep: Episode, raw: str, head: str, causes: tuple[Cause, ...]) -> None:
    ep.announce = (next((c for c in causes if c.announce), CAUSES_BY_NAME["hit_exception"]), raw, head)
    m = ANNOUNCED_STEP.search(head)
    if m is not None:
        ep.step = next((cause for cause, rx in STEP_CAUSES if rx.search(m.group(1))), None)
    specific = best_of(tuple(c for c in causes if c.cause != "other"))
    if specific is not None:
        ep.best = (specific, raw, head, ep.seq)
        ep.best_weak = True
