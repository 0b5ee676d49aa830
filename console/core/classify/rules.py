"""The structural rules: from the events of a log (plus the exit record and the first death) to
a state, a cause and the decisive line.

* A failure seen after the last normal event (ready, serving, progress) is *fresh*: it is how the
  log ends, so before ready the server failed, whatever the exception. A failure followed by
  progress is *demoted*: it did not stop the process, but it stays the root cause if the
  process goes down later (a TP rank's OOM before the launcher notices).
* After ready only a crash fails the server: a crash-grade cause (GPU OOM, CUDA, NCCL, graph
  capture), a going-down line, a traceback of an engine/worker loop. A handled request error
  does not.
* An operator's stop (SIGTERM/SIGINT lines, Ctrl-C, ``stopped_by_operator``) is *stopped* unless a
  real crash came before it; what the stop itself produces (sigquit, ``Killed``, a
  ``KeyboardInterrupt`` traceback) is no crash.
* The exit record outranks the log: a server that ended on its own failed, whatever its log says.
* The first death decides: a worker killed by a signal before its launcher noticed is the cause,
  not the launcher's follow-up line.
* A health probe answered (``GET /health 200``) shows the HTTP front end alive: a server up when
  nothing crashed, but no revival of one whose worker crashed. A handled request error (a request
  handler's traceback, a request refused for its length) shows a serving server.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from console.core.classify.episode import Failure
from console.core.classify.hints import hint_for, signal_of, signame
from console.core.classify.lines import Line, clean
from console.core.classify.patterns import GIVING_UP
from console.model import (
    Classification,
    ExitRecord,
    FailureCause,
    ProcessExit,
    ServeMetrics,
)

MAX_RETURNED_LINE = 1000
"""Longest decisive line returned (longer ones are cut and end with an ellipsis)."""

NO_FAILURE_LINE = "no failure line in the log"
"""How a failure's ``line`` begins when the log holds no failure line (the rest says what ended the server)."""

SPECIFIC_SCORE = 60
"""A failure at least this specific names a cause on its own (a warning-grade NCCL WARN does not)."""

FRESH_BONUS = 10
"""A candidate followed by normal progress is probably not what killed the server."""


PHASE_SCORE = 50
"""A cause inferred from the start-up step only: above a bare traceback, below any named cause."""

CUT_RULES = ("announce", "traceback")
"""Failures with no exception line of their own (a header or an announcing line, then frames)."""


def infer_cut(f: Failure) -> Failure:
    """A failure cut before its exception line, with no telling frame, takes the cause that the
    start-up step it happened in shows (``patterns.PHASES`` that are no guess); the decisive line stays
    its header. A guessed step leaves ``other`` (``Failure.guess`` feeds the hint)."""
    if f.cause == "other" and f.rule in CUT_RULES and f.phase is not None:
        return replace(f, cause=f.phase, score=max(f.score, PHASE_SCORE))
    return f


MAX_RETRIED = 8
"""Message heads of retried failures remembered."""


def _head(detail: str | None) -> str | None:
    """What a failure message says before its first ``: `` (``Error retrieving safetensors``), when that is a phrase."""
    if not detail or ": " not in detail:
        return None
    head = detail.split(": ", 1)[0].strip()
    # a phrase (``Error retrieving safetensors``), not an exception's class name, which other failures share
    return head if 8 <= len(head) <= 120 and " " in head else None


def _better(a: Failure | None, b: Failure) -> bool:
    """``b`` beats ``a``: more specific, or as specific and earlier (the root cause)."""
    return a is None or b.score > a.score or (b.score == a.score and b.seq < a.seq)


@dataclass(slots=True)
class State:
    """Everything remembered about a log: bounded whatever its size."""

    sglang: bool = False
    vllm: bool = False
    ready_line: str | None = None
    sglang_rank: bool = False
    """An SGLang prefix with a rank (``[... TP0]``) was seen: only SGLang prints that."""
    ready_explicit: bool = False
    fresh: dict[str, Failure] = field(default_factory=dict)
    demoted: dict[str, Failure] = field(default_factory=dict)
    stop_line: str | None = None
    stop_seq: int | None = None
    sigterm_line: str | None = None
    metrics: dict[str, float | int] = field(default_factory=dict)
    runs_skipped: int = 0
    """Earlier server runs of the log, forgotten when the next one started (:meth:`new_run`)."""
    run_line: str | None = None
    """The start banner of the run being read (set once an earlier run was skipped)."""
    ready_front_end: bool = False
    """The ready line is an HTTP server's start (uvicorn's) and nothing served since: for SGLang only a step."""
    retried_heads: tuple[str, ...] = ()
    """The message heads (``Error retrieving safetensors``) of failures said to be retried: their repeats are
    the retries' own reports, handled as the first one was (bounded: the last few)."""

    def copy(self) -> State:
        return State(self.sglang, self.vllm, self.ready_line, self.sglang_rank, self.ready_explicit, dict(self.fresh),
                     dict(self.demoted), self.stop_line, self.stop_seq, self.sigterm_line, dict(self.metrics),
                     self.runs_skipped, self.run_line, self.ready_front_end, self.retried_heads)

    # ------------------------------------------------------------ the Sink protocol

    def seen(self, line: Line) -> None:
        if line.sglang:
            self.sglang = True
            self.sglang_rank = self.sglang_rank or line.sglang_rank
        if line.vllm:
            self.vllm = True

    def is_sglang(self) -> bool:
        """SGLang's log: its prefix and no vLLM line, or its rank-tagged prefix, which only SGLang prints (old
        SGLang logs lines of vLLM modules it uses, e.g. custom all-reduce, in vLLM's format)."""
        return self.sglang and (not self.vllm or self.sglang_rank)

    def ready(self, raw: str, explicit: bool, front_end: bool = False) -> None:
        if explicit and not self.ready_explicit:
            self.ready_explicit = True
            self.ready_line = raw
            self.ready_front_end = front_end
            self._reset()
        elif self.ready_line is None:
            self.ready_line = raw
            self.ready_front_end = front_end
            self._reset()
        else:
            self.progress()

    def serving(self, raw: str) -> None:
        if self.stop_seq is not None:
            return  # a stop was asked for: batches now are its drain (SGLang serves what it holds), no revival
        if self.ready_line is None:
            self.ready(raw, False)
        elif not self.going_down():
            self.ready_front_end = False
            self.progress()

    def warmup_request(self) -> None:
        """SGLang's own warmup asked for its model's info (``GET /get_model_info``, an endpoint only SGLang serves)
        before it said it is ready: the log is SGLang's, and uvicorn's start line was a step of its start-up, not
        ready (README: uvicorn's lines and that request are loading)."""
        self.sglang = True
        if self.ready_line is not None and self.ready_front_end:
            self.ready_line, self.ready_explicit, self.ready_front_end = None, False, False
        self.progress()

    def going_down(self) -> bool:
        """A process of the server was seen going down after it was ready: a stats line printed after that (one
        more buffered batch line of a rank) is stale and revives nothing; only a new ready line does."""
        return any(c.terminal and not c.stop_induced for c in self.fresh.values())

    def stopped_run(self) -> bool:
        """The run being read was stopped (a stop line, no ready line since): a start-up step now is a restart."""
        return self.stop_seq is not None

    def probe(self, raw: str) -> None:
        """A health probe was answered: the HTTP front end lives. That shows a server up when nothing crashed,
        but revives none whose scheduler or worker crashed (a front end outlives its workers)."""
        if any(c.crash or c.terminal for c in self.fresh.values()):
            return
        self.serving(raw)

    def progress(self) -> None:
        for cause, c in self.fresh.items():
            if _better(self.demoted.get(cause), c):
                self.demoted[cause] = c
        self.fresh.clear()

    def stop(self, raw: str, seq: int, sigterm: bool) -> None:
        if self.stop_seq is None:
            self.stop_seq, self.stop_line = seq, raw
        if sigterm and self.sigterm_line is None:
            self.sigterm_line = raw

    def retried(self) -> None:
        """The last failure is tried again (``retrying 1 of 2``): handled, like one that progress followed; its
        message head is remembered, so that the retries' own reports of it are handled too."""
        last = max(self.fresh.values(), key=lambda c: c.seq, default=None)
        if last is None or last.terminal:
            return  # nothing reported yet, or a process going down (its retry is a restart)
        self.fresh.pop(last.cause)
        if _better(self.demoted.get(last.cause), last):
            self.demoted[last.cause] = last
        head = _head(last.detail)
        if head is not None and head not in self.retried_heads:
            self.retried_heads = (self.retried_heads + (head,))[-MAX_RETRIED:]

    def failure(self, f: Failure) -> None:
        f = infer_cut(f)
        if not f.terminal and self.retried_heads and _head(f.detail) in self.retried_heads and \
                not GIVING_UP.search(f.detail or ""):
            if _better(self.demoted.get(f.cause), f):  # one more report of an error that is being retried
                self.demoted[f.cause] = f
            return
        if f.rule == "traceback":
            f = self._cut_takes_line(f)
        if f.request and self.ready_line is None and f.phase != "warmup_failed":
            self.serving(f.line)  # a handled request error: the server was serving requests (the excerpt began later)
        if _better(self.fresh.get(f.cause), f):
            self.fresh[f.cause] = f

    def _cut_takes_line(self, f: Failure) -> Failure:
        """A traceback cut before its exception names nothing: the failure's line said before it (no normal event
        between) is its decisive line, the cause stays what the file shows."""
        prev = self.fresh.get(f.cause)
        if not (prev is not None and self._going_down(prev, f)):
            # the going-down line just before it may have another, unspecific cause (an executor's "got fatal signal
            # from worker processes" before its own cut traceback) when it is the same process's; another process's
            # traceback (a worker's, tagged) is that worker's own failure and keeps its header
            prev = max((c for c in self.fresh.values() if c.cause in ("other", "signal_killed") and c.tag == f.tag
                        and self._going_down(c, f)), key=lambda c: c.seq, default=None)
        if prev is not None:
            # the going-down line just before it (a launcher's "Received sigquit ..."), the failure's first line
            return replace(f, line=prev.line, detail=prev.detail)
        return f

    @staticmethod
    def _going_down(prev: Failure, f: Failure) -> bool:
        """``prev`` is a going-down line (not a cut traceback, not a request's error) seen before ``f``."""
        return prev.terminal and prev.rule not in CUT_RULES and prev.seq < f.seq and not prev.request

    def metric(self, name: str, value: float) -> None:
        self.metrics[name] = value

    def run_over(self) -> bool:
        """The run being read reached ready or went down (a stop line, a terminal failure or a crash): a start
        banner now begins another run. Before that, a banner is one more rank or node of the same start."""
        if self.ready_line is not None or self.stop_seq is not None:
            return True
        return any(c.terminal or c.crash for group in (self.fresh, self.demoted) for c in group.values())

    def new_run(self, raw: str, same_program: bool = False) -> None:
        """Forget the run read so far: only the last server run of a log is classified. ``same_program``: a
        restart seen without a start banner (uvicorn starting again after a stop) keeps which server it is."""
        skipped = self.runs_skipped + 1
        who = (self.sglang, self.vllm, self.sglang_rank)
        fresh = State()
        for f in fields(State):
            setattr(self, f.name, getattr(fresh, f.name))
        self.runs_skipped, self.run_line = skipped, raw
        if same_program:
            self.sglang, self.vllm, self.sglang_rank = who

    def _reset(self) -> None:
        """The server became ready: what happened before did not kill it."""
        self.fresh.clear()
        self.demoted.clear()
        self.stop_line = self.stop_seq = None

    # ------------------------------------------------------------ questions

    def best(self, *, fresh_only: bool = False, before: int | None = None,
             real_only: bool = False) -> Failure | None:
        """The failure that explains how the log ends.

        The first death decides: among the fresh failures with a specific cause, the earliest
        (the consequences on other ranks come after it). Otherwise the most specific one, fresh
        ones with a bonus over those that progress followed.
        """
        first: Failure | None = None
        for c in self.fresh.values():
            if (before is not None and c.seq >= before) or (real_only and c.stop_induced):
                continue
            if (c.score >= SPECIFIC_SCORE and c.cause not in ("other", "signal_killed")
                    and c.rule not in ("exception", "announce", "traceback")):
                if first is None or c.seq < first.seq:
                    first = c
        if first is not None:
            return first
        best: Failure | None = None
        best_eff = -1
        groups = [(self.fresh, FRESH_BONUS)] + ([] if fresh_only else [(self.demoted, 0)])
        for group, bonus in groups:
            for c in group.values():
                if (before is not None and c.seq >= before) or (real_only and c.stop_induced):
                    continue
                eff = c.score + bonus
                if eff > best_eff or (eff == best_eff and best is not None and c.seq < best.seq):
                    best, best_eff = c, eff
        return self._with_shown_exception(best)

    def _with_shown_exception(self, c: Failure | None) -> Failure | None:
        """A traceback cut before its exception line whose cause was read from where it stopped: an earlier
        rank's traceback of the same failure (no progress between) that shows its exception line, with no cause
        of its own, gives the line - the most specific line of that failure - while the cut one keeps the cause."""
        if c is None or c.rule not in CUT_RULES or c.cause == "other":
            return c
        shown = self.fresh.get("other")
        if shown is None or shown.rule != "exception" or shown.seq >= c.seq:
            return c
        return replace(c, line=shown.line)

    def fatal(self, *, before: int | None = None, real_only: bool = False) -> bool:
        """The log ends in a failure (after ready: in a crash)."""
        for c in self.fresh.values():
            if (before is not None and c.seq >= before) or (real_only and c.stop_induced):
                continue
            if self.ready_line is None or c.crash or c.terminal:
                return True
        return False


# ---------------------------------------------------------------- decision

def _metrics(st: State) -> ServeMetrics | None:
    return ServeMetrics(**st.metrics) if st.metrics else None


def exit_sentence(exit: ExitRecord) -> str:
    """What the exit record says ended the server (``the server was killed by SIGKILL``)."""
    sig = signal_of(exit)
    if sig is not None:
        what = f"was killed by {signame(sig)}"
    elif exit.exit_code is not None:
        what = f"exited with code {exit.exit_code}"
    else:
        what = "ended (exit status unknown)"
    if exit.host_oom_killed:
        what += " while the kernel's OOM killer fired"
    return f"the server {what}"


def no_failure_line(exit: ExitRecord | None = None, death: ProcessExit | None = None) -> str:
    """The ``line`` of a failure whose log holds no failure line: says so, then what ended the server (the first
    death, else the exit record). No other line of the log (a health probe, the ready line) stands in for it."""
    if death is not None:
        return f"{NO_FAILURE_LINE}; {death.cause_line()}"
    if exit is not None:
        return f"{NO_FAILURE_LINE}; {exit_sentence(exit)}"
    return NO_FAILURE_LINE


def _run(st: State) -> dict[str, object]:
    """The fields that say which server run of the log was read."""
    if not st.runs_skipped:
        return {}
    return {"runs_skipped": st.runs_skipped,
            "run_started_line": clean(st.run_line, MAX_RETURNED_LINE) if st.run_line else None}


def _failed(st: State, c: Failure | None, cause: FailureCause, exit: ExitRecord | None,
            hint: str | None = None, line: str | None = None,
            death: ProcessExit | None = None, line_in_log: bool = False) -> Classification:
    """A failure; its line is ``line`` (a sentence unless ``line_in_log``), else the failure's own log line, else
    the sentence saying the log holds none."""
    if line is None and c is not None:
        line, line_in_log = c.line, True
    elif line is None:
        line, line_in_log = no_failure_line(exit, death), False
    return Classification(state="failed", cause=cause, line=clean(line, MAX_RETURNED_LINE) if line else None,
                          hint=hint or hint_for(cause, c, exit, vllm=st.vllm and not st.sglang, death=death),
                          metrics=_metrics(st), line_in_log=line_in_log and bool(line), **_run(st))


def _alive(st: State) -> Classification:
    if st.ready_line is not None:
        return Classification(state="ready", line=clean(st.ready_line, MAX_RETURNED_LINE), metrics=_metrics(st),
                              line_in_log=True, **_run(st))
    return Classification(state="loading", metrics=_metrics(st), **_run(st))


def _stopped(st: State, hint: str | None = None) -> Classification:
    line = clean(st.stop_line, MAX_RETURNED_LINE) if st.stop_line else None
    return Classification(state="stopped", line=line, hint=hint, metrics=_metrics(st), line_in_log=line is not None,
                          **_run(st))


DRAIN_END_SIGNALS = (9, 15)
"""How a server that received SIGTERM ends its drain: SGLang waits for its requests (``Gracefully exiting...
Remaining number of requests N``), then kills its own process tree with SIGKILL (exit 137 / -9); a SIGTERM that
ended it before its handler ran gives 15."""


def _drained_stop(st: State, exit: ExitRecord, death: ProcessExit | None) -> str | None:
    """A stop from outside the console that the log shows and nothing contradicts: the hint saying so, else None.

    Positive evidence only: the log's own SIGTERM line, no crash before it, an exit that a drain ends with (0,
    or SIGKILL/SIGTERM), no OOM kill counted, and no first death that is anything but such a signal."""
    if st.sigterm_line is None or exit.error or exit.host_oom_killed:
        return None
    if st.fatal(before=st.stop_seq, real_only=True):
        return None
    sig = signal_of(exit)
    if exit.exit_code not in (0, None) and sig not in DRAIN_END_SIGNALS:
        return None
    if exit.exit_code is None and sig is None:
        return None
    if death is not None and ((death.oom_kill_delta or 0) > 0
                              or (death.exit_code not in (0, None) and not death.signal)
                              or (death.signal and death.signal not in DRAIN_END_SIGNALS)):
        return None
    how = "exited with code 0" if sig is None else f"ended by {signame(sig)}"
    tail = " (SGLang kills its own process tree with SIGKILL once its requests have drained)" if sig == 9 else ""
    return f"stopped from outside mtpconsole: the server got SIGTERM and {how}{tail}"


def _specific(c: Failure | None) -> bool:
    """The failure names its cause (a bare ``Killed`` only guesses the OOM killer)."""
    return c is not None and c.cause not in ("other", "signal_killed") and c.rule != "killed"


def decide(st: State, exit: ExitRecord | None, death: ProcessExit | None = None,
           exec_failure: Failure | None = None) -> Classification:
    """The classification of a log's events, its exit record and its first abnormal death."""
    operator = exit is not None and exit.stopped_by_operator
    if exit is not None and exit.error and not operator:
        return _failed(st, exec_failure, exec_failure.cause if exec_failure else "other", exit, line=exit.error)
    if death is not None and not death.abnormal:
        death = None
    drained = None if exit is None or operator else _drained_stop(st, exit, death)
    if drained is not None:
        return _stopped(st, hint=drained)
    if death is not None:
        by_death = _first_death(st, exit, death)
        if by_death is not None:
            return by_death

    if operator:
        # Only a crash the log shows before the stop keeps it a failure.
        if st.fatal(before=st.stop_seq, real_only=True):
            best = st.best(before=st.stop_seq, real_only=True)
            if best is not None and (st.ready_line is None or best.crash or best.terminal):
                return _failed(st, best, best.cause, exit)
        return _stopped(st)

    if exit is None:
        if st.stop_seq is not None and not st.fatal(before=st.stop_seq, real_only=True):
            return _stopped(st)
        if st.fatal():
            best = st.best()
            return _failed(st, best, best.cause if best else "other", None)
        return _alive(st)

    # The process ended on its own: failed, whatever the log says. After ready, lines that
    # serving went on after are not what ended it.
    ready = st.ready_line is not None
    sig = signal_of(exit)
    best = st.best(fresh_only=ready)
    if st.fatal() and best is not None:
        if best.rule == "killed" and not exit.host_oom_killed and exit.oom_kill_after is not None:
            return _failed(st, best, "signal_killed", exit)  # SIGKILL, and the OOM counter says not the kernel
        if exit.host_oom_killed and (
                best.cause == "signal_killed" or (best.cause == "other" and (sig is not None or best.rule != "exception"))):
            return _failed(st, best, "host_oom_killed", exit)
        return _failed(st, best, best.cause, exit)
    if _specific(best):
        assert best is not None
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
        return _failed(st, None, "other", exit, line=st.sigterm_line, line_in_log=True,
                       hint=f"the server got SIGTERM from outside mtpconsole and exited (code {code}) {when}")
    hint = f"the server exited with code {code} {when}"
    if code == 2 and not ready:
        hint += "; exit code 2 usually means its argument parser rejected the command line"
    hint += "; read the end of the log"
    return _failed(st, None, "other", exit, hint=hint)


def _first_death(st: State, exit: ExitRecord | None, death: ProcessExit) -> Classification | None:
    """A process of the session died abnormally first: its death decides unless the log names a cause."""
    if exit is not None and exit.stopped_by_operator and death.after_stop_request:
        return None
    best = st.best()
    if (death.signal or (death.oom_kill_delta or 0) > 0) and not _specific(best):
        cause: FailureCause = "host_oom_killed" if (death.oom_kill_delta or 0) > 0 else "signal_killed"
        return _failed(st, best, cause, exit, line=_death_line(best, death), death=death)
    if _specific(best):
        assert best is not None
        return _failed(st, best, best.cause, exit, death=death)
    if best is not None and st.fatal():
        return _failed(st, best, best.cause, exit, death=death)
    return _failed(st, best, "other", exit, line=_death_line(best, death), death=death)


def _death_line(best: Failure | None, death: ProcessExit) -> str:
    """The first death as the line: beside the log's (unspecific) failure line, or saying the log holds none."""
    return death.cause_line() if best is not None else no_failure_line(death=death)


def apply_first_death(cls: Classification | None, death: ProcessExit | None,
                      exit: ExitRecord | None = None) -> Classification | None:
    """A classification already made from the log, refined by the session's first abnormal death.

    For callers that hold a live classifier's result and the session snapshot
    (``SessionInfo.first_abnormal_exit``): a worker killed by a signal or by the OOM killer before
    its launcher noticed is the cause, unless the log already names a specific one.
    """
    if death is None or not death.abnormal or (exit is not None and exit.stopped_by_operator):
        return cls
    if cls is not None and cls.state == "failed" and cls.cause not in (None, "other", "signal_killed"):
        return cls
    oom = (death.oom_kill_delta or 0) > 0
    if not oom and cls is not None and cls.state == "stopped" and death.signal in DRAIN_END_SIGNALS:
        return cls  # the log shows a SIGTERM drain: the server's own kill of its tree ends it that way
    if not oom and not death.signal and cls is not None and cls.state == "failed":
        return cls  # a worker exited with an error code: the log's own failure line says more
    cause: FailureCause = "host_oom_killed" if oom else ("signal_killed" if death.signal else "other")
    logged = cls is not None and cls.state == "failed" and cls.line_in_log  # the log's own (unspecific) failure line
    line = death.cause_line() if logged else no_failure_line(death=death)
    run = {"runs_skipped": cls.runs_skipped, "run_started_line": cls.run_started_line} if cls is not None else {}
    return Classification(state="failed", cause=cause, line=clean(line, MAX_RETURNED_LINE),
                          hint=hint_for(cause, None, exit, death=death),
                          metrics=cls.metrics if cls is not None else None, **run)
