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

from dataclasses import replace
from typing import Protocol

from console.core.classify.episode import Episode, Failure, announce_into, best_of, causes_of, follow_up
from console.core.classify.lines import QUIET_LEVELS, Line, read_line
from console.core.classify.patterns import (
    ARGPARSE_ERROR,
    BENIGN,
    CAUSES,
    CHAIN,
    CHILD_CRASH,
    CONFIG_DUMP,
    EXCEPTION,
    EXCEPTION_IGNORED,
    EXIT_CODE,
    FAULTHANDLER_THREAD,
    FRAME_LINE,
    GIVING_UP,
    HTTP,
    IGNORED_EXCEPTIONS,
    PHASES,
    PROGRESS_ANY,
    RANK_DIED,
    READY_GATE,
    RESTART_LINE,
    RETRYING,
    SERVING_GATE,
    SGLANG,
    SGLANG_WARMUP_PATH,
    SGLANG_WARMUP_PHASE,
    SIGTERM_NUMBER,
    SPEC_CONTEXT,
    SPEC_CONTEXT_OFF,
    SPEC_PROGRESS,
    START_BANNERS,
    STOP_ANY,
    STOP_EXCEPTIONS,
    STOP_GATE,
    SYMPTOMS,
    TRACEBACK,
    USAGE_CONTINUED,
    USAGE_SHAPE,
    USAGE_START,
    VALIDATION_HEADER,
    VALIDATION_MESSAGE,
    VLLM,
)
from console.model import FailureCause

FATAL_DUMP_RULES = ("native_crash", "signal_crash")
"""Causes whose ``Fatal Python error`` line opens an event: faulthandler's thread dump follows it."""

GLOG_FATAL_SCORE = 14
"""A glog FATAL line (``[F1019 ... file.cpp:N] ...``) naming no known cause: it proves the abort, not why."""

SYMPTOM_ERROR_SCORE = 60
"""A ``SYMPTOMS`` line at ERROR/FATAL severity: it names its cause on its own (``rules.SPECIFIC_SCORE``)."""

USAGE_SCORE = 80
"""A usage dump cut before its ``error:`` line: argparse's refusal, though the flag it names is not shown."""

MAX_CONTINUATION = 12
"""Message lines after an exception that still belong to it."""


class Sink(Protocol):
    """What receives the events (``rules.State``)."""

    def seen(self, line: Line) -> None: ...
    def is_sglang(self) -> bool: ...
    def ready(self, raw: str, explicit: bool, front_end: bool = False) -> None: ...
    def serving(self, raw: str) -> None: ...
    def probe(self, raw: str) -> None: ...
    def progress(self) -> None: ...
    def stop(self, raw: str, seq: int, sigterm: bool) -> None: ...
    def failure(self, f: Failure) -> None: ...
    def metric(self, name: str, value: float) -> None: ...
    def run_over(self) -> bool: ...
    def new_run(self, raw: str, same_program: bool = False) -> None: ...
    def stopped_run(self) -> bool: ...
    def retried(self) -> None: ...
    def warmup_request(self) -> None: ...


class Reader:
    """Turns lines into events for a :class:`Sink`; bounded state, linear work."""

    def __init__(self) -> None:
        self.seq = 0
        self.ep: Episode | None = None
        self.usage: tuple[str, int, bool] | None = None
        """(raw line, seq, argparse's shape) of a ``usage:`` line whose dump is still being read (its ``error:``
        comes last)."""
        self.spec_step = False
        """The last start-up step was on the speculative path (loading the draft model ...)."""
        self.phase: FailureCause | None = None
        self.phase_guess = False
        """``phase`` is only what failures at that step usually are (``PHASES``)."""
        self.symptom: FailureCause | None = None
        """A durable warning seen so far (``SYMPTOMS``): what a cut failure at any later step points at."""
        self.fired_up = False
        """SGLang said it is ready (after its warmup): uvicorn's lines after that start no warmup."""
        self.spec_seen = False
        """Some line so far shows the server runs speculative decoding (``SPEC_CONTEXT``)."""
        self.glog_quiet: tuple[Line, int] | None = None
        """The last line when it was a glog INFO/WARNING line (skipped): should ``Exception raised from ...`` follow,
        it was the message of a C++ exception being thrown (torch's c10::Error), not a warning."""
        """What the last start-up step points at should it fail (``PHASES``)."""
        self.ignored_seq: int | None = None
        """The line of Python's ``Exception ignored in ...`` report: the traceback right after it was ignored."""

    def copy(self) -> Reader:
        r = Reader()
        r.seq, r.usage, r.spec_step, r.phase = self.seq, self.usage, self.spec_step, self.phase
        r.phase_guess = self.phase_guess
        r.spec_seen, r.fired_up, r.symptom = self.spec_seen, self.fired_up, self.symptom
        r.glog_quiet = self.glog_quiet
        r.ignored_seq = self.ignored_seq
        if self.ep is not None:
            r.ep = replace(self.ep, flags=set(self.ep.flags))
        return r

    def reset(self) -> None:
        """A gap in the log: an open episode ends where the text stops."""
        self.ep = None

    def _new_run(self) -> None:
        """A new server run began: nothing read of the previous one (its step, its symptoms) carries over."""
        self.ep = self.usage = None
        self.spec_step = self.phase_guess = self.fired_up = self.spec_seen = False
        self.phase = self.symptom = None

    def close(self, sink: Sink) -> None:
        if self.ep is not None:
            ep, self.ep = self.ep, None
            f = None if ep.ignored else ep.to_failure()
            if f is not None:
                sink.failure(self._where(f))
            elif ep.last_exc is not None and ep.last_exc[2].rsplit(".", 1)[-1] in STOP_EXCEPTIONS:
                sink.stop(ep.last_exc[0], ep.seq, False)
        if self.usage is not None and self.usage[2]:
            # The text stops inside an argparse usage dump: argparse prints it, then its ``error:`` line, then exits
            # (``--help`` goes on to help sections, which end the dump): the command line was refused.
            raw, seq, _ = self.usage
            sink.failure(Failure("bad_flags", USAGE_SCORE, seq, raw, "usage", terminal=True, detail=raw))
        self.usage = None

    # ------------------------------------------------------------ one line

    def line(self, raw: str, sink: Sink) -> None:
        ln = read_line(raw)
        body = ln.body
        if not body:
            return
        self.seq += 1
        seq = self.seq
        if body.startswith(START_BANNERS):
            self.close(sink)  # what was open belongs to the run before
            if sink.run_over():
                sink.new_run(ln.raw)
                self._new_run()
        sink.seen(ln)
        if not self.spec_seen and SPEC_CONTEXT.search(ln.raw):
            self.spec_seen = SPEC_CONTEXT.search(SPEC_CONTEXT_OFF.sub("", ln.raw)) is not None
        if "etr" in body and RETRYING.search(body) and not GIVING_UP.search(body):
            self.close(sink)
            sink.retried()  # what just failed is tried again: a handled error (its line may go on to say so)
        ep = self.ep
        if ep is not None and self._continues(ep, ln, body, seq):
            return
        if self.usage is not None:
            if ARGPARSE_ERROR.match(body):
                self.usage = None
                self._emit(sink, Failure("bad_flags", 95, seq, ln.raw, "argparse", terminal=True, detail=body))
                return
            if ln.indented or USAGE_CONTINUED.match(body):
                return  # the usage text goes on
            self.usage = None  # the dump ended with no error (``--help``'s sections, other output): read the line
        if USAGE_START.match(body):
            self.close(sink)
            self.usage = (ln.raw, seq, USAGE_SHAPE.match(body) is not None)
            return
        if ln.interrupt:
            self.close(sink)
            sink.stop(ln.raw, seq, False)
        quiet = ln.level in QUIET_LEVELS
        thrown, self.glog_quiet = self.glog_quiet, (ln, seq) if quiet and ln.glog else None
        if thrown is not None and body.startswith("Exception raised from"):
            self._failure_line(thrown[0], thrown[0].body, thrown[1], sink)  # c10::Error: the line above is its message
            return
        if ln.indented or (not quiet and FRAME_LINE.match(body)):
            if quiet:
                return
            if body.startswith('File "'):  # a traceback whose start is not in the log
                self.close(sink)
                self.ep = Episode(seq=seq)
                self.ep.frame(ln.raw, body, seq)
            elif body.startswith("what():"):  # C++ terminate message
                self._failure_line(ln, body, seq, sink)
            return
        if not quiet and (body.startswith(TRACEBACK) or EXCEPTION.match(body)):
            self._failure_line(ln, body, seq, sink)
            return
        if self._normal(ln, body, seq, sink):
            return
        if quiet:
            self._symptom(body)  # a warning that says what is going wrong (a c10d socket timing out)
            return
        if BENIGN.search(body) or body.startswith(("frame #", "Exception raised from")):
            return
        self._failure_line(ln, body, seq, sink)

    def _symptom(self, body: str) -> bool:
        """A warning that is no failure yet but says what is going wrong (``SYMPTOMS``): the step's cause."""
        if "[c10d]" in body or "capability" in body:
            for cause, durable, rx in SYMPTOMS:
                if rx.search(body):
                    self.phase, self.phase_guess = cause, False
                    self.symptom = cause if durable else self.symptom
                    return True
        return False

    def _continues(self, ep: Episode, ln: Line, body: str, seq: int) -> bool:
        """The line belongs to the open episode (frame, chain, exception, message)."""
        if ep.collecting:
            if ln.indented or FRAME_LINE.match(body):
                ep.frame(ln.raw, body, seq)
                return True
            if body.startswith(CHAIN) or FAULTHANDLER_THREAD.match(body):
                return True
            if body.startswith(TRACEBACK):
                if ep.tag is None or ln.tag is None or ln.tag == ep.tag:
                    ep.header = ep.header or ln.raw  # not another process's header, interleaved with this one's
                return True
            m = EXCEPTION.match(body)
            if m:
                ep.exception(ln.raw, body, m.group(1), seq, ln.tag)
                return True
            if ep.after_frame and not self._is_event(body) and not _announces(body):
                ep.frame(ln.raw, body, seq)  # the frame's source line, pasted without its indentation
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
        if body.startswith(TRACEBACK) and ep.continuation <= 2 and not (
                ln.tag != ep.exc_tag and ep.last_exc is not None and follow_up(ep.last_exc[1])):
            # a chain pasted without its "During handling ..." line; not the traceback of the process that
            # a follow-up ("EngineDeadError: ... see above") points at, which another process prints
            ep.collecting = True
            return True
        m = EXCEPTION.match(body)
        if m and ln.level not in QUIET_LEVELS:
            ep.exception(ln.raw, body, m.group(1), seq, ln.tag)
            return True
        if ep.continuation < MAX_CONTINUATION and not self._is_event(body) and not _announces(body):
            ep.continuation += 1
            if ep.message is None and VALIDATION_MESSAGE.match(body) and ep.last_exc is not None and \
                    VALIDATION_HEADER.search(ep.last_exc[1]):
                ep.message = (ln.raw, body)  # pydantic's header, then the message that says what is wrong
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
        """A generic failure right after a speculative start-up step is a speculative failure;
        every failure carries the step it happened in, else the speculative path when the log shows
        one (``rules`` decides whether that counts)."""
        if self.spec_step and f.cause == "other" and f.rule not in ("child_exit", "sigquit", "killed"):
            return replace(f, cause="spec_decode_error", score=max(f.score, 60))
        shown = self.symptom or (None if self.phase_guess else self.phase)
        if shown is not None:
            return replace(f, phase=shown)
        guess = f.guess or self.phase or ("spec_decode_error" if self.spec_seen else None)
        return replace(f, guess=guess) if guess is not None else f

    def _normal(self, ln: Line, body: str, seq: int, sink: Sink) -> bool:
        """Ready, serving, metrics, progress and stop lines; True when the line was one.

        Substring gates keep the common lines (batch, HTTP, errors) to one or two regex scans.
        """
        if any(g in body for g in SERVING_GATE):
            for fw in (SGLANG, VLLM):
                if fw.serving.search(body):
                    self.close(sink)
                    self.spec_step = False
                    self.phase = None
                    if fw.metrics_line.search(body):
                        self._metrics(fw.metrics, body, sink, decode="Prefill batch" not in body)
                    sink.serving(ln.raw)
                    return True
        if "HTTP/" in body:
            m = HTTP.search(body)
            if m is not None:
                if m.group(1) == "GET" and m.group(3) == "200" and m.group(2).startswith(SGLANG_WARMUP_PATH) and \
                        not self.fired_up:
                    self.close(sink)  # SGLang's warmup asks for its model's info first: still starting
                    self.phase, self.phase_guess = SGLANG_WARMUP_PHASE, False
                    sink.warmup_request()
                elif m.group(3) == "200" and m.group(1) == "POST":
                    self.close(sink)
                    self.phase = None
                    sink.serving(ln.raw)
                elif m.group(3) == "200" and m.group(2).startswith(("/health", "/ready")):
                    self.close(sink)
                    self.phase = None
                    sink.probe(ln.raw)
                return True
        if sink.stopped_run() and (RESTART_LINE.search(body) or PROGRESS_ANY.search(body)):
            self.close(sink)  # the server was stopped and starts again (a supervisor's restart, a re-run)
            sink.new_run(ln.raw, same_program=True)
            self._new_run()
            sink.seen(ln)
        if any(g in body for g in READY_GATE):
            if SGLANG.ready.search(body):
                self.close(sink)
                self.spec_step = False
                self.phase = None
                self.fired_up = True
                sink.ready(ln.raw, True)
                return True
            if VLLM.ready.search(body):
                self.close(sink)
                if SGLANG.progress.search(body) and sink.is_sglang() and not self.fired_up:
                    self.phase, self.phase_guess = SGLANG_WARMUP_PHASE, False
                    sink.progress()  # SGLang: uvicorn is up, its warmup is still to come
                else:
                    self.phase = None
                    sink.ready(ln.raw, "Started server process" not in body, front_end=True)
                return True
        if "Mean acceptance length" in body:
            self._metrics(VLLM.metrics, body, sink, decode=True)
            return True
        if any(g in body for g in STOP_GATE) and STOP_ANY.search(body):
            self.close(sink)
            sink.stop(ln.raw, seq, "SIGTERM" in body or "signum=15" in body or SIGTERM_NUMBER.search(body) is not None)
            return True
        if PROGRESS_ANY.search(body):
            self.close(sink)
            self.spec_step = SPEC_PROGRESS.search(body) is not None and not CONFIG_DUMP.search(body)
            self.phase, self.phase_guess = next(((cause, guess) for cause, guess, rx in PHASES if rx.search(body)),
                                                (None, False))
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
        if FAULTHANDLER_THREAD.match(body):  # faulthandler's dump with its ``Fatal Python error`` line cut off
            self.close(sink)
            self.ep = Episode(seq=seq, header=ln.raw)
            return
        if body.startswith(EXCEPTION_IGNORED):
            self.close(sink)  # Python reports an exception it ignores (a finaliser's, an atexit callback's)
            self.ignored_seq = seq
            return
        if TRACEBACK in body:
            self.close(sink)
            ep = Episode(seq=seq, header=ln.raw, header_tag=ln.tag, ignored=self.ignored_seq == seq - 1)
            head = body.split(TRACEBACK, 1)[0]
            if head.strip():
                announce_into(ep, ln.raw, head, causes_of(head, False))
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
            ep = Episode(seq=seq)
            ep.exception(ln.raw, body, name, seq, ln.tag)
            self.ep = ep
            return
        crash = CHILD_CRASH.search(body) or RANK_DIED.search(body) or EXIT_CODE.match(body)
        if crash is not None:
            code = int(crash.group(crash.lastindex or 0))
            if code < 0:
                f = Failure("signal_killed", 30, seq, ln.raw, "child_signal", terminal=True, stop_induced=True,
                            detail=str(code))
            else:
                f = Failure("other", 12, seq, ln.raw, "child_exit", terminal=True, detail=str(code))
            self._emit(sink, f)
            return
        causes = causes_of(body, False)
        if not causes and ln.glog_source is not None:
            # the message names no cause: the C++ component that reports it says which family (``ProcessGroupGloo``
            # receiving errors from a rank); a message that names one (a CUDA error the NCCL watchdog caught) decides
            causes = causes_of(f"{ln.glog_source} {body}", False)
        if not causes and ln.level in ("ERROR", "FATAL") and self._symptom(body):
            # a symptom logged as an error: the component gave up (a c10d client that timed out connecting), so it
            # is the failure itself, not a warning of one
            assert self.phase is not None
            self._emit(sink, Failure(self.phase, SYMPTOM_ERROR_SCORE, seq, ln.raw, "symptom_error", crash=True,
                                     terminal=ln.level == "FATAL", detail=body))
            return
        if ln.level == "FATAL":  # glog's FATAL (torch's C++ code): the process aborts right after this line
            best = best_of(causes)
            if best is None or best.announce:
                self._emit(sink, Failure("other", GLOG_FATAL_SCORE, seq, ln.raw, "glog_fatal", crash=True,
                                         terminal=True, detail=body))
            else:
                self._emit(sink, Failure(best.cause, best.score, seq, ln.raw, best.name, crash=True, terminal=True,
                                         detail=body))
            return
        if not causes:
            self._symptom(body)
            return
        best = best_of(causes)
        assert best is not None
        if any(c.announce for c in causes) or (best.name in FATAL_DUMP_RULES and body.startswith("Fatal Python error")):
            self.close(sink)
            ep = Episode(seq=seq)
            announce_into(ep, ln.raw, body, causes)
            ep.tag = ln.tag
            self.ep = ep
            return
        self._emit(sink, Failure(best.cause, best.score, seq, ln.raw, best.name,
                                 crash=best.crash or (best.terminal and not best.stop_induced),
                                 terminal=best.terminal, stop_induced=best.stop_induced, detail=body, tag=ln.tag))


def _announces(body: str) -> bool:
    return TRACEBACK in body or bool(ARGPARSE_ERROR.match(body)) or any(
        c.terminal and c.rx.search(body) for c in CAUSES if c.cause == "other")
