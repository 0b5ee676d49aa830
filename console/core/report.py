"""The incident report: one session's failure written up as Markdown a team can paste into a postmortem.

:func:`build_report` is pure: it takes :class:`ReportInputs` (gathered by ``mtpconsole report``
from the run directory, the audit log, the host's ring of GPU samples and the planner) and
returns the Markdown text. Every string from the host goes through :func:`~console.core.text.clean`
(secrets masked, escape sequences and control characters dropped), so a secret, an OSC title or a
terminal escape in a log line, a flag or an audit entry never reaches the report; in prose and table
cells ``<``, entity-like ``&`` and ``[``/``]`` are escaped too, so a log's HTML or links never render.
A time that is not a finite, representable timestamp (NaN, 1e300 in a hand-edited ``exit.json``) reads
"unknown time" and never ends the report.
"""

from __future__ import annotations

import difflib
import math
import re
import time
from collections.abc import Sequence

from pydantic import Field

from console.core.redact import redact_argv
from console.core.server_info import age_text, facts_text
from console.core.text import MAX_LINE, clean
from console.model import (
    AuditEntry,
    Classification,
    ExitRecord,
    Frozen,
    GpuPoint,
    LaunchSpec,
    ProcessExit,
    ServerFacts,
    Step,
)

EXCERPT_BEFORE = 12
"""Log lines shown before the decisive line (enough for the step that led to it)."""
EXCERPT_AFTER = 6
GPU_BEFORE_S = 120.0
"""The report's GPU table starts this long before the failure (24 samples of the host's 5 s ring)..."""
GPU_AFTER_S = 60.0
"""... and ends this long after it."""
MAX_ARGV_CHARS = 100_000
"""The launch command is shown whole up to this many characters."""
LAST_TIME = 253402300799.0
"""9999-12-31T23:59:59Z: a later (or negative, or NaN) timestamp is no time at all."""


def plausible_time(at: float | None) -> float | None:
    """``at`` when it is a timestamp that can be written as a date (finite, 1970..9999), else None."""
    if at is None or isinstance(at, bool) or not isinstance(at, (int, float)):
        return None
    return float(at) if math.isfinite(at) and 0 <= at <= LAST_TIME else None


class TimelineEvent(Frozen):
    """Something that happened around the session, with its time."""

    at: float | None
    """None: the record's time was not a usable timestamp (the event is listed last)."""
    what: str
    source: str
    """audit, step, exit, event, record."""


class ReportInputs(Frozen):
    """Everything the report says, gathered before it is written."""

    host: str
    session_id: str
    spec: LaunchSpec | None = None
    started_at: float | None = None
    exit: ExitRecord | None = None
    classification: Classification | None = None
    state: str | None = None
    previous: LaunchSpec | None = None
    """The session launched on the same GPU just before this one."""
    planner: str | None = None
    steps: list[Step] = Field(default_factory=list)
    audit: list[AuditEntry] = Field(default_factory=list)
    events: list[TimelineEvent] = Field(default_factory=list)
    samples: list[GpuPoint] = Field(default_factory=list)
    log_lines: list[str] = Field(default_factory=list)
    generated_at: float = Field(default_factory=time.time)
    panel_svg: str | None = None
    """File name of the panel's SVG beside the report, when one was written."""
    broken: str | None = None
    """Why the session's run directory cannot be trusted (the agent's reason): its files were not used."""
    server_facts: ServerFacts | None = None
    """What the session's server offered on ``/server_info`` + ``/model_info`` when the report was gathered (a
    READY session only; None: not read)."""


def _t(at: float | None) -> str:
    if at is None:
        return "–"
    ok = plausible_time(at)
    if ok is None:
        return "unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ok)) + f".{int(ok * 1000) % 1000:03d}Z"


_ENTITY = re.compile(r"&(?=#?[0-9A-Za-z]+;)")


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell or a line of prose: :func:`clean` (secrets masked, no escapes or
    control characters, one line), and nothing a renderer would turn into HTML, an entity or a link."""
    text = clean(text).replace("\\", "\\\\")
    text = _ENTITY.sub("&amp;", text).replace("<", "&lt;")
    return text.replace("[", "\\[").replace("]", "\\]").replace("|", "\\|").strip()


def _span(text: str) -> str:
    """``text`` as one inline code span (its backticks can never close it early) inside a table cell."""
    text = clean(text).replace("|", "\\|").strip()
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    tick = "`" * (run + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{tick}{pad}{text}{pad}{tick}"


def _code(lines: Sequence[str], lang: str = "text", limit: int = MAX_LINE) -> list[str]:
    """A fenced block of ``lines``, each :func:`clean` (cut at ``limit``): HTML in it stays text, and no line
    closes the fence."""
    shown = [clean(line, limit) for line in lines]
    fence = "```"
    while any(fence in line for line in shown):
        fence += "`"
    return [fence + lang, *shown, fence]


def _ended(inp: ReportInputs) -> str:
    ex = inp.exit
    if ex is None:
        return "still running" if inp.state in ("ready", "loading", "launching") else "no exit record"
    how = (f"exit code {ex.exit_code}" if ex.exit_code is not None else
           f"signal {ex.signal}" if ex.signal is not None else ex.error or "unknown")
    if ex.stopped_by_operator:
        how += ", stopped by an operator"
    if ex.host_oom_killed:
        how += f", kernel OOM killer fired (oom_kill {ex.oom_kill_before} -> {ex.oom_kill_after})"
    return f"{how} at {_t(ex.ended_at)}"


def summary(inp: ReportInputs) -> list[str]:
    c = inp.classification
    spec = inp.spec
    gpus = ", ".join(str(g) for g in spec.gpus) if spec and spec.gpus else "?"
    state = (inp.state or (c.state if c else "unknown")).upper()
    cause = f": {c.cause}" if c and c.cause else ""
    rows = [
        ("Host", _md(inp.host)), ("Session", _span(inp.session_id)), ("GPU(s)", gpus),
        ("Port", str(spec.port) if spec and spec.port else "–"),
        ("Outcome", f"**{_md(state + cause)}**"),
        ("Started", _t(inp.started_at or (spec.created_at if spec else None))),
        ("Ended", _ended(inp)),
    ]
    if inp.broken:
        rows.append(("Run directory", f"broken: {_md(inp.broken)} (its spec, record and exit files are not used)"))
    if c and c.runs_skipped:
        rows.append(("Log", f"read from the last of {c.runs_skipped + 1} server runs in it (earlier runs skipped)"))
    if c and c.line:
        rows.append(("Decisive line", _span(c.line)))
    if c and c.hint:
        rows.append(("Hint", _md(c.hint)))
    if inp.planner:
        rows.append(("Memory planner", _md(inp.planner)))
    if inp.server_facts is not None:
        rows.append(("Server facts", server_facts_cell(inp.server_facts, inp.generated_at)))
    return ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]


def server_facts_cell(f: ServerFacts, now: float) -> str:
    """The summary's ``Server facts`` cell: the terse line, the model, and when it was read (its age at the
    report, ``stale`` past three probe periods); a server without the endpoints reads "not offered"."""
    when = f"read {_t(f.at)}, {age_text(f.age(now))} before this report" + (", stale" if f.stale(now) else "")
    text = facts_text(f)
    if text is None:
        return f"not offered (`/server_info`, `/model_info`: nothing usable; {when})"
    model = f.served_model_name or f.model_path
    arch = ", ".join(f.architectures)
    what = "; ".join(filter(None, (text, f"model {model}" if model else "", arch)))
    return f"{_md(what)} ({when})"


HELPER_ROLES = ("other", "resource_tracker")
"""Processes that serve no request (multiprocessing's resource tracker...): noise in a postmortem."""


def exit_events(exits: Sequence[ProcessExit], first: ProcessExit | None) -> list[TimelineEvent]:
    """The session's process ends for the timeline, in the order they ended (the first death first): server
    processes, and a helper only when it is the first death; a leftover says the supervisor killed it."""
    def is_first(x: ProcessExit) -> bool:
        return first is not None and (x.pid, x.start_ticks) == (first.pid, first.start_ticks)

    return [TimelineEvent(at=x.at, what=x.describe(), source="exit") for x in exits
            if x.at is not None and (x.role not in HELPER_ROLES or is_first(x))]


def timeline(inp: ReportInputs) -> list[str]:
    events = list(inp.events)
    for a in inp.audit:
        verdict = "ok" if a.ok else ("failed" if a.ok is False else "sent")
        args = " ".join(f"{k}={v}" for k, v in a.args.items() if k in ("session_id", "gpus", "port", "pid"))
        events.append(TimelineEvent(at=a.at, what=" ".join(filter(None, (f"`{a.op}`", args, f"→ {verdict}"))),
                                    source="audit"))
    for s in inp.steps:
        if s.started_at is not None:  # a step is placed when it ended: its verdict is what happened then
            ev = f" — {s.evidence}" if s.evidence else ""
            events.append(TimelineEvent(at=step_end(s), what=f"step **{s.name}**: {s.state}{ev}", source="step"))
    if inp.exit is not None:
        events.append(TimelineEvent(at=inp.exit.ended_at, what=f"server ended: {_ended(inp)}", source="exit"))
    events.sort(key=_order)
    if not events:
        return ["No recorded events."]
    return ["| time (UTC) | what | source |", "|---|---|---|",
            *(f"| {_t(e.at)} | {_md(e.what)} | {e.source} |" for e in events)]


def step_end(s: Step) -> float | None:
    """When a step ended: its start plus its elapsed time (its start while it runs or when it was not timed)."""
    start = plausible_time(s.started_at)
    if start is None:
        return s.started_at
    elapsed = s.elapsed_s if s.elapsed_s is not None and math.isfinite(s.elapsed_s) and s.elapsed_s > 0 else 0.0
    return plausible_time(start + elapsed) or start


def _order(e: TimelineEvent) -> tuple[bool, float]:
    at = plausible_time(e.at)
    return (at is None, at or 0.0)


def flags_section(inp: ReportInputs) -> list[str]:
    if inp.spec is None:
        return ["The run directory has no launch spec."]
    argv = redact_argv(inp.spec.argv)
    out = _code([" ".join(argv)], limit=MAX_ARGV_CHARS)
    if inp.previous is not None:
        prev = redact_argv(inp.previous.argv)
        diff = list(difflib.unified_diff(_flag_lines(prev), _flag_lines(argv), f"previous ({inp.previous.session_id})",
                                         f"this ({inp.session_id})", lineterm="", n=0))
        out += ["", f"Changed from the previous session on this GPU ({_span(inp.previous.session_id)}):", ""]
        out += _code(diff, "diff") if diff else ["No flag changed."]
    return out


def _flag_lines(argv: Sequence[str]) -> list[str]:
    """One line per flag with its values, so a diff reads per flag."""
    lines: list[str] = []
    for tok in argv:
        if tok.startswith("-") and not _is_number(tok) or not lines:
            lines.append(tok)
        else:
            lines[-1] += " " + tok
    return lines


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def failure_time(inp: ReportInputs) -> float | None:
    """When the session failed (or ended): its first abnormal process exit, else the exit record; None while it
    runs or when neither holds a usable time."""
    first = [at for e in inp.events if e.source == "exit" and (at := plausible_time(e.at)) is not None]
    ended = plausible_time(inp.exit.ended_at) if inp.exit is not None else None
    return min(first) if first else ended


def gpu_window(inp: ReportInputs) -> tuple[float, float]:
    """The span of the GPU table: :data:`GPU_BEFORE_S` before the failure to :data:`GPU_AFTER_S` after it (for a
    session still running, the last :data:`GPU_BEFORE_S` before the report)."""
    at = failure_time(inp)
    if at is None:
        return inp.generated_at - GPU_BEFORE_S, inp.generated_at
    return at - GPU_BEFORE_S, at + GPU_AFTER_S


def gpu_points(inp: ReportInputs) -> list[GpuPoint]:
    """The GPU samples around the failure (:func:`gpu_window`), in time order."""
    lo, hi = gpu_window(inp)
    return sorted((p for p in inp.samples if plausible_time(p.at) is not None and lo <= p.at <= hi),
                  key=lambda p: (p.at, p.gpu))


def gpu_section(inp: ReportInputs) -> list[str]:
    points = gpu_points(inp)
    if not points:
        lo, hi = gpu_window(inp)
        return [f"No GPU samples were kept from {_t(lo)} to {_t(hi)} (the host's sample ring was empty, "
                "unreadable or did not reach back that far)."]
    out = ["| time (UTC) | GPU | power | memory | util |", "|---|---|---|---|---|"]
    for p in points:
        power = f"{p.power_w:.0f} / {p.power_limit_w:.0f} W" if p.power_w is not None and p.power_limit_w else "–"
        mem = (f"{p.mem_used_mib / 1024:.1f} / {p.mem_total_mib / 1024:.1f} GiB"
               if p.mem_used_mib is not None and p.mem_total_mib else "–")
        util = f"{p.util_pct:.0f} %" if p.util_pct is not None else "–"
        out.append(f"| {_t(p.at)} | {p.gpu} | {power} | {mem} | {util} |")
    return out


def excerpt(inp: ReportInputs) -> list[str]:
    lines = inp.log_lines
    if not lines:
        return ["The session's log is empty."]
    line = inp.classification.line if inp.classification else None
    idx = max((i for i, x in enumerate(lines) if line and x.strip() == line.strip()), default=None)
    if idx is None:
        lo, hi, where = max(0, len(lines) - EXCERPT_BEFORE - EXCERPT_AFTER), len(lines), "the last lines"
    else:
        lo, hi, where = max(0, idx - EXCERPT_BEFORE), min(len(lines), idx + EXCERPT_AFTER + 1), \
            f"lines {max(0, idx - EXCERPT_BEFORE) + 1}–{min(len(lines), idx + EXCERPT_AFTER + 1)}"
    return [f"From the session's own `output.log` ({where} of {len(lines)}):", "", *_code(lines[lo:hi])]


def build_report(inp: ReportInputs) -> str:
    """The whole report as Markdown."""
    c = inp.classification
    title = f"Incident report: {inp.session_id} on {inp.host}"
    if c and c.cause:
        title += f" — {c.cause}"
    byline = (f"_Written by mtpconsole at {_t(inp.generated_at)} from the run directory, the audit log and the "
              "host's GPU samples; secrets masked._")
    parts = [f"# {_md(title)}", "", byline, "",
             "## Summary", "", *summary(inp), ""]
    if inp.panel_svg:
        parts += [f"![the GPU panel at the failure]({inp.panel_svg})", ""]
    parts += ["## Timeline", "", *timeline(inp), "",
              "## Flags", "", *flags_section(inp), "",
              "## GPU around the failure", "", *gpu_section(inp), "",
              "## Log excerpt", "", *excerpt(inp), ""]
    return "\n".join(parts)
