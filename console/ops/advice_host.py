"""Gathering the advisor's inputs for one host: figures, flags, the model's shape, orphans.

Pure over a :class:`~console.model.HostView` except :func:`load_shapes`, which reads each
served model's ``config.json`` on the host through the link (once per model path, cached by the
caller) so the planner can check suggestions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import Field

from console.core.advisor import HostContext, ServerContext, Validator, advise
from console.core.flags.launcher import split_launch_command
from console.core.metrics import (
    MetricsParseError,
    figures_from_log,
    merge,
    parse_sglang_metrics,
)
from console.core.model_config import ModelConfigError, ModelShape, parse_model_config
from console.core.orphans import Orphan, find_orphans
from console.core.planner import parse_server_flags
from console.core.sessions import derive_views, process_inputs
from console.link.client import HostClient, Wire
from console.link.errors import LinkDown, RequestError
from console.model import (
    Advice,
    Classification,
    Frozen,
    GpuSample,
    HostView,
    ServeMetrics,
    ServerProc,
    ServingFigures,
    SessionView,
)
from console.ops.foreign_log import NoOutput, foreign_output

if TYPE_CHECKING:
    from console.core.flags import FlagSchema
    from console.model import HostSnapshot

ReadFile = Callable[[str], Awaitable[bytes | str]]

LIVE_STATES = {"ready", "loading", "foreign", "launching"}


def model_path(flags: Mapping[str, Any]) -> str | None:
    """The served model's path in parsed server flags (``--model-path``, else ``--model``)."""
    v = flags.get("model-path") or flags.get("model")
    return str(v) if v else None


def argv_model_path(argv: Sequence[str]) -> str | None:
    """The served model's path in a server's whole command line (launcher split off)."""
    return model_path(parse_server_flags(split_launch_command(argv).flags))


def _launcher(view: HostView, s: SessionView) -> ServerProc | None:
    return next((p for p in view.snapshot.servers if p.pid == s.launcher_pid), None)


def view_key(s: SessionView) -> str:
    """How a server is keyed in per-server maps: its session id, else ``pid:<launcher pid>``."""
    return s.session_id or f"pid:{s.launcher_pid}"


class LiveLogs(Frozen):
    """What the live servers' own logs say, per server key (:func:`view_key`): their last lines, their last
    serving figures, when those were read (console clock, epoch seconds) and when the line that gave the
    figures was written as far as it can be shown (``figures_at``: a figure's age is counted from it)."""

    tails: dict[str, list[str]] = Field(default_factory=dict)
    metrics: dict[str, ServeMetrics] = Field(default_factory=dict)
    read_at: dict[str, float] = Field(default_factory=dict)
    figures_at: dict[str, float] = Field(default_factory=dict)
    """When ``metrics``' line was written at the latest (:func:`log_figures_at`); metrics without it are undated
    and never used."""


def to_console_clock(snap: HostSnapshot, host_t: float | None) -> float | None:
    """A host-clock time on the console's clock (the sample's host time against when it arrived); None when
    either is unknown."""
    if host_t is None or snap.sampled_at is None or snap.received_at is None:
        return None
    return host_t + (snap.received_at - snap.sampled_at)


def log_figures_at(lines: Sequence[str], read_at: float, written_at: float | None = None) -> float | None:
    """When the log's last metrics line was written at the latest (console clock): the log's end (when it was
    read, or its file's last write when earlier) less how long the log went on after that line, by the log's
    own timestamps. None when there is no metrics line or that lag cannot be shown."""
    from console.core.classify.stamps import metrics_lag  # not before the first frame (tui.LATER_MODULES)

    lag = metrics_lag(lines)
    if lag is None:
        return None
    end = read_at if written_at is None else min(read_at, written_at)
    return end - lag


def dated_log_figures(lines: Sequence[str], read_at: float, written_at: float | None = None) -> tuple[
        ServeMetrics | None, float | None]:
    """(the last serving figures of the log's last server run, when their line was written); (None, None) when
    it has none or they cannot be dated."""
    from console.core.classify import classify

    m = classify("\n".join(lines)).metrics
    at = log_figures_at(lines, read_at, written_at) if m is not None else None
    return (m, at) if at is not None else (None, None)


def figures_for(view: HostView, s: SessionView, logs: LiveLogs | None = None) -> ServingFigures:
    """The server's figures: its live launcher's ``/metrics`` when the agent fetched it, else its log's last
    batch line - each dated when it was produced, as far as that can be shown.

    ``logs`` gives the log figures: dated ones (``metrics`` with ``figures_at``: a hand-started server's stdout
    file, a session log read with its file's time), else those of a followed log's last lines (``tails``, read
    at the view's sample). A log figure that cannot be dated is left out."""
    key = view_key(s)
    snap = view.snapshot
    log = ServingFigures()
    if logs is not None and key in logs.metrics and key in logs.figures_at:
        log = figures_from_log(logs.metrics[key], logs.figures_at[key])
    elif logs is not None and key in logs.tails and snap.received_at is not None:
        m, at = dated_log_figures(logs.tails[key], logs.read_at.get(key, snap.received_at))
        log = figures_from_log(m, at)
    proc = _launcher(view, s)
    at = to_console_clock(snap, proc.metrics_at) if proc is not None else None
    if proc is None or not proc.alive or not proc.metrics_text or at is None:
        return log
    try:
        return merge(parse_sglang_metrics(proc.metrics_text, at), log)
    except MetricsParseError:
        return log


def live_server(view: HostView, s: SessionView) -> bool:
    """Positive evidence that ``s`` is served by a live process: its launcher is alive in the snapshot, not a
    worker (an orphaned worker's view is no server), and a managed session's run directory says its server is
    alive."""
    proc = _launcher(view, s)
    if proc is None or not proc.alive or proc.role in ("worker", "supervisor"):
        return False
    if s.session_id is None:
        return proc.role == "launcher"
    info = next((x for x in view.snapshot.sessions if x.session_id == s.session_id), None)
    return info is not None and info.server_alive and info.exit is None


def advised_servers(view: HostView) -> list[SessionView]:
    """The servers the advisor reads: per GPU its current session (``console.core.current``), when it is live and
    :func:`live_server` proves a live process serves it; a tp>1 server once, on its first GPU."""
    from console.core.current import current_by_gpu

    out: list[SessionView] = []
    # a tracker's view carries its GPUs' current sessions already (the same rule, plus pending launches and the
    # superseded, which are never live servers)
    current = view.current or current_by_gpu(view.sessions, [g.index for g in view.snapshot.gpus])
    for c in current:
        s = c.session
        if s is None or s.state not in LIVE_STATES or not s.gpus or s.gpus[0] != c.index:
            continue
        if live_server(view, s):
            out.append(s)
    return out


def server_contexts(view: HostView, shapes: Mapping[str, ModelShape] | None = None,
                    history: Mapping[str, Sequence[ServingFigures]] | None = None,
                    logs: LiveLogs | None = None, now: float | None = None) -> list[ServerContext]:
    """One context per advised server (:func:`advised_servers`), on its first GPU; ``now``: the console's clock
    (default: when the view's sample arrived)."""
    snap = view.snapshot
    gpus: dict[int, GpuSample] = {g.index: g for g in snap.gpus}
    tails = logs.tails if logs is not None else {}
    when = now if now is not None else (snap.received_at or 0.0)
    gpu_at = to_console_clock(snap, snap.gpu_sampled_at or snap.sampled_at)
    out = []
    for s in advised_servers(view):
        argv = split_launch_command(s.argv).flags
        flags = parse_server_flags(argv)
        key = view_key(s)
        path = model_path(flags)
        tail = tails.get(key, ())
        out.append(ServerContext(
            host=snap.name, gpu=gpus[s.gpus[0]], now=when, gpu_at=gpu_at, session_id=s.session_id,
            pid=None if s.session_id else s.launcher_pid, flags_argv=argv, flags=flags,
            figures=figures_for(view, s, logs), history=(history or {}).get(key, ()),
            log_tail=tail, retract_lag_s=_retract_lag(tail), shape=(shapes or {}).get(path) if path else None,
            throttle_reasons=tuple(gpus[s.gpus[0]].throttle_reasons or ())))
    return out


def _retract_lag(lines: Sequence[str]) -> float | None:
    """How long the log went on after its last retraction line (its own clock), None if none or undated."""
    from console.core.classify.stamps import lag_after

    for i in range(len(lines) - 1, -1, -1):
        if "Retract requests" in lines[i] or "retract" in lines[i].lower():
            return lag_after(lines, i)
    return None


def _live_ids(view: HostView) -> set[str]:
    return {s.session_id for s in view.sessions if s.session_id and s.state in LIVE_STATES | {"stopping"}}


def orphans_of(view: HostView) -> list[Orphan]:
    """The proven orphans of the view's snapshot (:func:`console.core.orphans.find_orphans`): alive, holding GPU
    memory per the GPU source, of an ended session or adopted after whoever started them died."""
    return [o for o in find_orphans(view.snapshot, live_ids=_live_ids(view)) if o.held_mib > 0]


class OrphanMemo:
    """:func:`orphans_of` for one host, judged again only when what it reads changed (the snapshot's
    :func:`~console.core.sessions.process_inputs` and the live session ids): a host whose processes stay as they
    are costs a comparison per reading."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._orphans: list[Orphan] = []

    def orphans(self, view: HostView) -> list[Orphan]:
        """What :func:`orphans_of` returns for ``view``."""
        key = (process_inputs(view.snapshot), frozenset(_live_ids(view)))
        if key != self._key:
            self._orphans = orphans_of(view)
        self._key = key  # equal or not: the next reading's unchanged items are these very objects
        return self._orphans


async def load_shapes(view: HostView, read_file: ReadFile, cache: dict[str, ModelShape | None]) -> dict[str, ModelShape]:
    """The parsed ``config.json`` of every model served on this host (``cache`` keeps failures too)."""
    for s in view.sessions:
        path = argv_model_path(s.argv)
        if not path or path in cache:
            continue
        try:
            raw = await read_file(path.rstrip("/") + "/config.json")
            cache[path] = parse_model_config(json.loads(raw))
        except (ModelConfigError, ValueError, KeyError, OSError, RuntimeError):
            cache[path] = None
    return {k: v for k, v in cache.items() if v is not None}


def host_advice(view: HostView, shapes: Mapping[str, ModelShape] | None = None, *,
                validate: Validator | None = None,
                history: Mapping[str, Sequence[ServingFigures]] | None = None,
                logs: LiveLogs | None = None, now: float | None = None,
                orphans: Sequence[Orphan] | None = None) -> list[Advice]:
    """The advisor's findings for one host view (``logs``: the live servers' own logs, when read; ``now``: the
    console's clock, default when the view's sample arrived; ``orphans``: :func:`orphans_of` the view, when the
    caller has them)."""
    ctxs = server_contexts(view, shapes, history, logs, now)
    host = HostContext(host=view.snapshot.name, gpus=view.snapshot.gpus,
                       orphans=list(orphans) if orphans is not None else orphans_of(view),
                       gpu_source=view.snapshot.gpu_source)
    return advise(ctxs, host, validate=validate)


LOG_TAIL_BYTES = 256 * 1024
"""Read this much of each live session's log for its classification and the retraction rule."""
LOG_TAIL_LINES = 200
"""Last lines of each server's log the advisor reads (retractions near a full KV cache)."""


def schema_validator(schema: FlagSchema) -> Validator:
    """The flag validator as the advisor uses it: the first error, or None when the flags are accepted."""
    from console.core.flags import validate

    def check(argv: list[str]) -> str | None:
        errors = [p for p in validate(argv, schema) if p.severity == "error"]
        return errors[0].message if errors else None
    return check


def figures_json(view: HostView, now: float, logs: LiveLogs | None = None) -> list[dict[str, Any]]:
    """Each live server's figures with their source and age, for ``status --json``."""
    out = []
    for s in view.sessions:
        if s.state not in LIVE_STATES:
            continue
        figs = figures_for(view, s, logs) if live_server(view, s) else ServingFigures()  # no figures of the dead
        fields = {}
        for name in ServingFigures.model_fields:
            f = getattr(figs, name)
            if f is not None:
                fields[name] = {"value": f.value, "source": f.source, "at": f.at, "age_s": round(max(0.0, now - f.at), 3)}
        out.append({"session_id": s.session_id, "pid": None if s.session_id else s.launcher_pid,
                    "gpus": s.gpus, "figures": fields})
    return out


async def read_foreign_logs(link: Wire | HostClient, view: HostView, *, tail_bytes: int = LOG_TAIL_BYTES,
                            clock: Callable[[], float] = time.time) -> LiveLogs:
    """The own output of each hand-started server of ``view`` whose stdout is a regular file.

    Its last lines and its last ``Decode batch`` figures, keyed by :func:`view_key`, dated when their line was
    written at the latest (:func:`log_figures_at`: the read by ``clock``, the file's last write, the log's own
    timestamps). Only servers whose launcher is alive (:func:`live_server`): an orphaned worker's stdout is
    its dead launcher's log. A server whose output is a pipe or a terminal, or that is gone, is left out (it
    has no log figures). The one reader of these figures, for ``status`` and the TUI."""
    tails: dict[str, list[str]] = {}
    metrics: dict[str, ServeMetrics] = {}
    read_at: dict[str, float] = {}
    figures_at: dict[str, float] = {}
    for s in view.sessions:
        if s.session_id is not None or s.state != "foreign" or s.launcher_pid is None or not live_server(view, s):
            continue
        try:  # one round trip: the process checked, the file's tail and its last write
            out = await foreign_output(link, s.launcher_pid, s.launcher_start_ticks, tail_bytes)
        except (NoOutput, LinkDown, TimeoutError):  # not a file, gone: no log figures
            continue
        key, lines = view_key(s), out.lines
        tails[key], read_at[key] = lines[-LOG_TAIL_LINES:], clock()
        written = to_console_clock(view.snapshot, out.mtime)
        m, at = dated_log_figures(lines, read_at[key], written)
        if m is not None and at is not None:
            metrics[key], figures_at[key] = m, at
    return LiveLogs(tails=tails, metrics=metrics, read_at=read_at, figures_at=figures_at)


async def view_with_live_sessions(link: Wire | HostClient, snap: HostSnapshot, now: float, *,
                                  clock: Callable[[], float] = time.time) -> tuple[HostView, LiveLogs]:
    """A HostView whose live sessions are classified from their own logs (ended ones are not read), and the
    logs' dated figures (read at ``clock``).

    A hand-started server's output is read from its stdout file when that is a regular file."""
    from console.core.classify import classify

    client = HostClient.of(link)
    classes: dict[str, Classification] = {}
    tails: dict[str, list[str]] = {}
    metrics: dict[str, ServeMetrics] = {}
    figures_at: dict[str, float] = {}
    for info in snap.sessions:
        if not info.server_alive:
            continue
        try:  # the tail and when output.log was last written, in one round trip
            chunk = await client.read_log(info.session_id, tail_bytes=LOG_TAIL_BYTES)
        except (RequestError, LinkDown, TimeoutError):  # unreadable: the session stays unclassified
            continue
        read_at = clock()
        classes[info.session_id] = classify(chunk.data, info.exit)
        lines = chunk.lines
        tails[info.session_id] = lines[-LOG_TAIL_LINES:]
        m, at = dated_log_figures(lines, read_at, to_console_clock(snap, chunk.mtime))
        if m is not None and at is not None:
            metrics[info.session_id], figures_at[info.session_id] = m, at
    view = HostView(snapshot=snap, sessions=derive_views(snap, classes, now, interval=1e9))
    foreign = await read_foreign_logs(client, view, clock=clock)
    return view, foreign.model_copy(update={"tails": {**tails, **foreign.tails},
                                            "metrics": {**metrics, **foreign.metrics},
                                            "figures_at": {**figures_at, **foreign.figures_at}})


async def advise_link(link: Wire | HostClient, snap: HostSnapshot, *, now: float, validate: Validator | None = None,
                      shape_cache: dict[str, ModelShape | None] | None = None) -> tuple[list[Advice], list[dict[str, Any]]]:
    """The advisor's findings and the serving figures of one connected host, read through its link."""
    view, logs = await view_with_live_sessions(link, snap, now, clock=lambda: now)  # read "now", as the rules see it

    async def read_file(path: str) -> str:
        return await HostClient.of(link).read_file(path, 4 << 20)

    shapes = await load_shapes(view, read_file, {} if shape_cache is None else shape_cache)
    advice = host_advice(view, shapes, validate=validate, logs=logs, now=now)
    return advice, figures_json(view, now, logs)
