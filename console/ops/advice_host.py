"""Gathering the advisor's inputs for one host: figures, flags, the model's shape, orphans.

Pure over a :class:`~console.model.HostView` except :func:`load_shapes`, which reads each
served model's ``config.json`` on the host through the link (once per model path, cached by the
caller) so the planner can check suggestions.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable, Mapping, Sequence

from console.model import Advice, GpuSample, HostView, ServerProc, ServingFigures, SessionView
from console.ops.advisor import HostContext, ServerContext, Validator, advise
from console.ops.metrics import MetricsParseError, figures_from_log, merge, parse_sglang_metrics
from console.ops.model_config import ModelConfigError, ModelShape, parse_model_config
from console.ops.planner import parse_server_flags

ReadFile = Callable[[str], Awaitable[bytes | str]]

LIVE_STATES = {"ready", "loading", "foreign", "launching"}


def server_flags(argv: Sequence[str]) -> list[str]:
    """The server flags of a launcher's argv: everything from the first ``--`` option on."""
    for i, tok in enumerate(argv):
        if tok.startswith("--"):
            return list(argv[i:])
    return []


def model_path(flags: Mapping[str, Any]) -> str | None:
    v = flags.get("model-path") or flags.get("model")
    return str(v) if v else None


def _launcher(view: HostView, s: SessionView) -> ServerProc | None:
    return next((p for p in view.snapshot.servers if p.pid == s.launcher_pid), None)


def figures_for(view: HostView, s: SessionView) -> ServingFigures:
    """The session's figures: ``/metrics`` when the agent fetched it, else its log's last batch line."""
    log = figures_from_log(s.metrics, view.snapshot.received_at)
    proc = _launcher(view, s)
    if proc is None or not proc.metrics_text or proc.metrics_at is None:
        return log
    try:
        return merge(parse_sglang_metrics(proc.metrics_text, proc.metrics_at), log)
    except MetricsParseError:
        return log


def server_contexts(view: HostView, shapes: Mapping[str, ModelShape] | None = None,
                    history: Mapping[str, Sequence[ServingFigures]] | None = None,
                    log_tails: Mapping[str, Sequence[str]] | None = None) -> list[ServerContext]:
    """One context per live server (managed or foreign) on this host, on its first GPU."""
    gpus: dict[int, GpuSample] = {g.index: g for g in view.snapshot.gpus}
    out = []
    for s in view.sessions:
        if s.state not in LIVE_STATES or not s.gpus or s.gpus[0] not in gpus:
            continue
        argv = server_flags(s.argv)
        flags = parse_server_flags(argv)
        key = s.session_id or f"pid:{s.launcher_pid}"
        path = model_path(flags)
        out.append(ServerContext(
            host=view.snapshot.name, gpu=gpus[s.gpus[0]], session_id=s.session_id,
            pid=None if s.session_id else s.launcher_pid, flags_argv=argv, flags=flags,
            figures=figures_for(view, s), history=(history or {}).get(key, ()),
            log_tail=(log_tails or {}).get(key, ()), shape=(shapes or {}).get(path) if path else None,
            throttle_reasons=tuple(gpus[s.gpus[0]].throttle_reasons or ())))
    return out


def orphan_holders(view: HostView) -> list[tuple[int, int | None, int]]:
    """(pid, GPU, MiB) for every compute process on a GPU that no live session or foreign server owns."""
    owned = {pid for s in view.sessions if s.state in LIVE_STATES | {"stopping"} for pid in s.pids}
    owned |= {p.pid for p in view.snapshot.servers if p.role in ("launcher", "supervisor")}
    out = []
    for g in view.snapshot.gpus:
        for proc in g.procs:
            if proc.pid not in owned and (proc.used_mib or 0) > 0:
                out.append((proc.pid, g.index, proc.used_mib or 0))
    return out


async def load_shapes(view: HostView, read_file: ReadFile, cache: dict[str, ModelShape | None]) -> dict[str, ModelShape]:
    """The parsed ``config.json`` of every model served on this host (``cache`` keeps failures too)."""
    for s in view.sessions:
        path = model_path(parse_server_flags(server_flags(s.argv)))
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
                log_tails: Mapping[str, Sequence[str]] | None = None) -> list[Advice]:
    """The advisor's findings for one host view."""
    ctxs = server_contexts(view, shapes, history, log_tails)
    host = HostContext(host=view.snapshot.name, gpus=view.snapshot.gpus, orphans=orphan_holders(view))
    return advise(ctxs, host, validate=validate)
