"""What a destructive action hits, in words, for the confirm dialogs of kill, relaunch and edit.

Pure functions over a :class:`SessionView` and the host's :class:`HostSnapshot`: the pids,
the port, the model, the uptime, the current traffic (running, queue, tok/s) and the GPU
memory a kill frees. Every figure is what the last sample says, and says so when unknown.
"""

from __future__ import annotations

import textwrap

from console.core.orphans import Orphan
from console.core.sessions import flag_value
from console.model import HostSnapshot, SessionView
from console.ui.format import NA, age_text, clean, gpu_list, short


def held_mib(s: SessionView, snap: HostSnapshot | None) -> dict[int, int]:
    """GPU index -> MiB the driver attributes to the session's processes (what a kill frees)."""
    if snap is None:
        return {}
    pids = set(s.pids) | ({s.launcher_pid} if s.launcher_pid else set())
    if s.session_id:
        pids |= {p.pid for p in snap.servers if p.session_id == s.session_id}
    out: dict[int, int] = {}
    for g in snap.gpus:
        mib = sum(p.used_mib or 0 for p in g.procs if p.pid in pids)
        if mib:
            out[g.index] = mib
    return out


def metrics_figures(s: SessionView, snap: HostSnapshot | None) -> str | None:
    """The launcher's own ``/metrics`` (fetched by the agent for ``--enable-metrics`` servers), in words."""
    if snap is None or not s.launcher_pid:
        return None
    p = next((x for x in snap.servers if x.pid == s.launcher_pid and x.metrics_text), None)
    if p is None or p.metrics_text is None:
        return None
    from console.core.metrics import MetricsParseError, parse_sglang_metrics

    try:
        f = parse_sglang_metrics(p.metrics_text, p.metrics_at or 0.0)
    except MetricsParseError:
        return None
    if f.running is None and f.queue is None and f.gen_throughput is None:
        return None

    def v(x) -> str:
        return NA if x is None else f"{x.value:.0f}"
    return f"{v(f.running)} running · {v(f.queue)} queued · {v(f.gen_throughput)} tok/s (/metrics)"


def traffic(s: SessionView, snap: HostSnapshot | None = None) -> str:
    """``8 running · 3 queued · 640 tok/s`` from the session's last serving figures (its log, else the
    server's /metrics; N/A when neither is known)."""
    m = s.metrics
    if m is None:
        fig = metrics_figures(s, snap)
        if fig:
            return fig
        return "N/A (no serving figures)" if s.state in ("ready", "foreign") else "none (not serving)"
    run = NA if m.running_req is None else str(m.running_req)
    queue = NA if m.queue_req is None else str(m.queue_req)
    tps = NA if m.gen_throughput is None else f"{m.gen_throughput:.0f}"
    return f"{run} running · {queue} queued · {tps} tok/s"


def impact_lines(s: SessionView, snap: HostSnapshot | None, now: float) -> list[str]:
    """The dialog lines that name exactly what is hit (one fact per line)."""
    held = held_mib(s, snap)
    model = flag_value(s.argv, "--model-path", "--model") if s.argv else None
    if s.ended_at:
        up = NA
    elif s.started_at:
        up = age_text(now - s.started_at)
    elif s.process_started_at:
        up = f"{age_text(now - s.process_started_at)} (started by hand: since its process started)"
    else:
        up = "N/A (started by hand: its process start is unknown)" if not s.session_id else NA
    lines = [
        f"host:     {clean(s.host, 80)}",
        f"session:  {clean(s.session_id or 'foreign (not launched by mtpconsole)', 80)} · {s.state.upper()}",
        f"pids:     {short(', '.join(map(str, s.pids)) or NA, 70)}"
        + (f" (launcher {s.launcher_pid})" if s.launcher_pid and len(s.pids) > 1 else ""),
        f"GPUs:     {gpu_list(s.gpus)} · port {s.port or NA}",
        f"model:    {short(clean(model or NA), 70)}",
        f"uptime:   {up}",
        f"traffic:  {traffic(s, snap)}",
        "frees:    " + (", ".join(f"{m:,} MiB on GPU {i}" for i, m in sorted(held.items()))
                        if held else "no GPU memory held (as last sampled)"),
    ]
    return lines


def orphan_lines(o: Orphan) -> list[str]:
    """The dialog lines of an orphan kill: identity, what it holds, and why it is suspected."""
    held = ", ".join(f"{m:,} MiB on GPU {i}" for i, m in sorted(o.gpu_mem_mib.items()))
    return [
        f"host:     {clean(o.host, 80)}",
        f"pid:      {o.pid} (start {o.start_ticks}, group {o.pgid}, parent {o.ppid})",
        f"title:    {short(clean(o.title), 70)}",
        f"port:     {o.port or NA}",
        f"frees:    {held or 'no GPU memory held (as last sampled)'}",
        "why (each fact re-checked when the kill starts):",
        *[line for e in o.evidence for line in textwrap.wrap(clean(e), 74, initial_indent="  - ",
                                                              subsequent_indent="    ", max_lines=3)],
    ]
