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
from console.ops.advisor import HostContext, ServerContext, Validator, advise
from console.ops.flags.launcher import split_launch_command
from console.ops.foreign_log import NoOutput, read_foreign_output
from console.ops.metrics import (
    MetricsParseError,
    figures_from_log,
    merge,
    parse_sglang_metrics,
)
from console.ops.model_config import ModelConfigError, ModelShape, parse_model_config
from console.ops.planner import parse_server_flags
from console.ops.sessions import derive_views
from console.remote.link import HostLink, LinkDown, RequestError

if TYPE_CHECKING:
    from console.model import HostSnapshot
    from console.ops.flags import FlagSchema

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
    serving figures and when those figures were read (epoch seconds; a figure's age is counted from it)."""

    tails: dict[str, list[str]] = Field(default_factory=dict)
    metrics: dict[str, ServeMetrics] = Field(default_factory=dict)
    read_at: dict[str, float] = Field(default_factory=dict)


def figures_for(view: HostView, s: SessionView, logs: LiveLogs | None = None) -> ServingFigures:
    """The session's figures: ``/metrics`` when the agent fetched it, else its log's last batch line.

    ``logs`` supplies the log figures of servers whose view has none (a hand-started server's
    stdout file, read separately), dated when they were read."""
    key = view_key(s)
    if s.metrics is not None:
        log = figures_from_log(s.metrics, view.snapshot.received_at)
    elif logs is not None and key in logs.metrics:
        log = figures_from_log(logs.metrics[key], logs.read_at.get(key, view.snapshot.received_at))
    else:
        log = ServingFigures()
    proc = _launcher(view, s)
    if proc is None or not proc.metrics_text or proc.metrics_at is None:
        return log
    try:
        return merge(parse_sglang_metrics(proc.metrics_text, proc.metrics_at), log)
    except MetricsParseError:
        return log


def server_contexts(view: HostView, shapes: Mapping[str, ModelShape] | None = None,
                    history: Mapping[str, Sequence[ServingFigures]] | None = None,
                    logs: LiveLogs | None = None) -> list[ServerContext]:
    """One context per live server (managed or foreign) on this host, on its first GPU."""
    gpus: dict[int, GpuSample] = {g.index: g for g in view.snapshot.gpus}
    tails = logs.tails if logs is not None else {}
    out = []
    for s in view.sessions:
        if s.state not in LIVE_STATES or not s.gpus or s.gpus[0] not in gpus:
            continue
        argv = split_launch_command(s.argv).flags
        flags = parse_server_flags(argv)
        key = view_key(s)
        path = model_path(flags)
        out.append(ServerContext(
            host=view.snapshot.name, gpu=gpus[s.gpus[0]], session_id=s.session_id,
            pid=None if s.session_id else s.launcher_pid, flags_argv=argv, flags=flags,
            figures=figures_for(view, s, logs), history=(history or {}).get(key, ()),
            log_tail=tails.get(key, ()), shape=(shapes or {}).get(path) if path else None,
            throttle_reasons=tuple(gpus[s.gpus[0]].throttle_reasons or ())))
    return out


def orphan_holders(view: HostView) -> list[tuple[int, int | None, int]]:
    """(pid, GPU, MiB) for every compute process on a GPU that no live session or foreign server owns."""
    owned = {pid for s in view.sessions if s.state in LIVE_STATES | {"stopping"} for pid in s.pids}
    owned |= {p.pid for p in view.snapshot.servers if p.role in ("launcher", "supervisor")}
    out: list[tuple[int, int | None, int]] = []
    for g in view.snapshot.gpus:
        for proc in g.procs:
            if proc.pid not in owned and (proc.used_mib or 0) > 0:
                out.append((proc.pid, g.index, proc.used_mib or 0))
    return out


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
                logs: LiveLogs | None = None) -> list[Advice]:
    """The advisor's findings for one host view (``logs``: the live servers' own logs, when read)."""
    ctxs = server_contexts(view, shapes, history, logs)
    host = HostContext(host=view.snapshot.name, gpus=view.snapshot.gpus, orphans=orphan_holders(view))
    return advise(ctxs, host, validate=validate)


LOG_TAIL_BYTES = 256 * 1024
"""Read this much of each live session's log for its classification and the retraction rule."""
LOG_TAIL_LINES = 200
"""Last lines of each server's log the advisor reads (retractions near a full KV cache)."""


def schema_validator(schema: FlagSchema) -> Validator:
    """The flag validator as the advisor uses it: the first error, or None when the flags are accepted."""
    from console.ops.flags import validate

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
        figs = figures_for(view, s, logs)
        fields = {}
        for name in ServingFigures.model_fields:
            f = getattr(figs, name)
            if f is not None:
                fields[name] = {"value": f.value, "source": f.source, "at": f.at, "age_s": round(max(0.0, now - f.at), 3)}
        out.append({"session_id": s.session_id, "pid": None if s.session_id else s.launcher_pid,
                    "gpus": s.gpus, "figures": fields})
    return out


async def read_foreign_logs(link: HostLink, view: HostView, *, tail_bytes: int = LOG_TAIL_BYTES,
                            clock: Callable[[], float] = time.time) -> LiveLogs:
    """The own output of each hand-started server of ``view`` whose stdout is a regular file.

    Its last lines and its last ``Decode batch`` figures, keyed by :func:`view_key` and dated by
    ``clock`` when read. A server whose output is a pipe or a terminal, or that is gone, is left
    out (it has no log figures). The one reader of these figures, for ``status`` and the TUI."""
    from console.ops.classify import classify  # not before the first frame (tui.LATER_MODULES)

    tails: dict[str, list[str]] = {}
    metrics: dict[str, ServeMetrics] = {}
    read_at: dict[str, float] = {}
    for s in view.sessions:
        if s.session_id is not None or s.state != "foreign" or s.launcher_pid is None:
            continue
        try:
            _, lines = await read_foreign_output(link, s.launcher_pid, s.launcher_start_ticks, tail_bytes)
        except (NoOutput, RequestError, LinkDown, TimeoutError):  # not a file, gone: no log figures
            continue
        key = view_key(s)
        tails[key], read_at[key] = lines[-LOG_TAIL_LINES:], clock()
        m = classify("\n".join(lines)).metrics
        if m is not None:
            metrics[key] = m
    return LiveLogs(tails=tails, metrics=metrics, read_at=read_at)


async def view_with_live_sessions(link: HostLink, snap: HostSnapshot, now: float) -> tuple[HostView, LiveLogs]:
    """A HostView whose live sessions are classified from their own logs (ended ones are not read).

    A hand-started server's output is read from its stdout file when that is a regular file."""
    classes: dict[str, Classification] = {}
    tails: dict[str, list[str]] = {}
    for info in snap.sessions:
        if not info.server_alive:
            continue
        try:
            r = await link.request("read_log", {"session_id": info.session_id, "tail_bytes": LOG_TAIL_BYTES},
                                   audit=False)
        except (RequestError, LinkDown, TimeoutError):  # unreadable: the session stays unclassified
            continue
        text = str(r.get("data", ""))
        from console.ops.classify import classify

        classes[info.session_id] = classify(text, info.exit)
        tails[info.session_id] = text.splitlines()[-LOG_TAIL_LINES:]
    view = HostView(snapshot=snap, sessions=derive_views(snap, classes, now, interval=1e9))
    foreign = await read_foreign_logs(link, view)
    return view, foreign.model_copy(update={"tails": {**tails, **foreign.tails}})


async def advise_link(link: HostLink, snap: HostSnapshot, *, now: float, validate: Validator | None = None,
                      shape_cache: dict[str, ModelShape | None] | None = None) -> tuple[list[Advice], list[dict[str, Any]]]:
    """The advisor's findings and the serving figures of one connected host, read through its link."""
    view, logs = await view_with_live_sessions(link, snap, now)

    async def read_file(path: str) -> str:
        r = await link.request("read_file", {"path": path, "max_bytes": 4 << 20}, audit=False)
        return str(r["data"])

    shapes = await load_shapes(view, read_file, {} if shape_cache is None else shape_cache)
    advice = host_advice(view, shapes, validate=validate, logs=logs)
    return advice, figures_json(view, now, logs)
