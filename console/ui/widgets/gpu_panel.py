"""One GPU: power bar + sparkline, utilisation, memory, temperature, processes, its session.

Mounted once per GPU and updated in place with :meth:`GpuPanel.apply`; the power history
(60 samples) lives here, one point per new host sample.
"""

from __future__ import annotations

from collections import deque

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from console.model import GpuSample, HostSnapshot, ServerProc, SessionView
from console.ui.format import NA, clean, gpu_list, na, short
from console.ui.widgets.badge import Badge, badge_for

BAR = 16
HISTORY = 60


def power_bar(w: float | None, limit: float | None) -> Content:
    if w is None:
        return Content.from_markup("pwr [$text-muted]$bar[/] N/A", bar="░" * BAR)
    frac = min(1.0, w / limit) if limit else 0.0
    fill = round(frac * BAR)
    style = "$text-warning" if frac > 0.95 else "$text-success"
    return Content.from_markup(
        f"pwr [{style}]$fill[/][$text-muted]$empty[/] $txt",
        fill="█" * fill, empty="░" * (BAR - fill), txt=f"{w:.0f}/{na(limit, '{:.0f}')} W",
    )


def stats_line(g: GpuSample) -> str:
    mem = NA
    if g.mem_used_mib is not None and g.mem_total_mib:
        mem = f"{g.mem_used_mib:,}/{g.mem_total_mib:,} MiB ({100 * g.mem_used_mib / g.mem_total_mib:.0f}%)"
    elif g.mem_used_mib is not None:
        mem = f"{g.mem_used_mib:,} MiB"
    return f"util {na(g.util_pct, '{:.0f}%')} · mem {mem} · {na(g.temp_c, '{:.0f}°C')}"


def procs_text(g: GpuSample, servers: dict[int, ServerProc], limit: int = 3) -> str:
    if not g.procs:
        return "no processes"
    rows = []
    for p in g.procs[:limit]:
        srv = servers.get(p.pid)
        title = srv.title if srv else (p.name or f"[{p.pid}]")
        rows.append(f"{p.pid:>7} {na(p.used_mib, '{:,} MiB'):>11}  {short(clean(title, 300), 200)}")
    if len(g.procs) > limit:
        rows.append(f"        +{len(g.procs) - limit} more")
    return "\n".join(rows)


def session_line(s: SessionView | None) -> str:
    if s is None:
        return "no server"
    who = clean(s.session_id, 80) if s.session_id else f"foreign pid {na(s.launcher_pid or (s.pids[0] if s.pids else None))}"
    parts = [who, f"tp {max(1, len(s.gpus))}", f"GPUs {gpu_list(s.gpus)}"]
    if s.port:
        parts.append(f":{s.port}")
    if s.flags_summary:
        parts.append(clean(s.flags_summary, 200))
    return " · ".join(parts)


def detail_line(s: SessionView | None) -> Content:
    if s is None:
        return Content("")
    if s.state == "failed":
        return Content.from_markup(
            "[$text-error]$line[/]$hint",
            line=short(clean(s.line or "no decisive log line"), 300),
            hint=f"\nhint: {short(clean(s.hint), 300)}" if s.hint else "",
        )
    m = s.metrics
    if m is None or s.state not in ("ready", "foreign"):
        return Content(f"log: {short(clean(s.line), 300)}" if s.line else "")
    return Content(
        f"{na(m.gen_throughput, '{:.1f}')} tok/s · accept {na(m.accept_len, '{:.2f}')}"
        f" · run {na(m.running_req)} · queue {na(m.queue_req)}"
    )


def put(w: Static, content: Content | str) -> None:
    """Update ``w`` only when what it shows changes (views are re-applied every second)."""
    if getattr(w, "_shown", None) != content:
        w._shown = content
        w.update(content)


class GpuPanel(Widget, can_focus=True):
    """The panel of GPU ``index`` on ``host``."""

    class Selected(Message):
        def __init__(self, panel: GpuPanel) -> None:
            super().__init__()
            self.panel = panel

    def __init__(self, host: str, index: int, **kw) -> None:
        super().__init__(classes="gpu-panel", **kw)
        self.host, self.index = host, index
        self.session: SessionView | None = None
        self.gpu: GpuSample | None = None
        self.history: deque[float] = deque(maxlen=HISTORY)
        self._last_sample: float | None = None
        self._pending: tuple | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(classes="row"):
            yield Static(f"GPU {self.index}", classes="title", markup=False)
            yield Badge()
        with Horizontal(classes="row detail"):
            yield Static("", classes="power", markup=False)
            yield Sparkline([], summary_function=max, classes="spark")
        yield Static("", classes="stats line", markup=False)
        yield Static("", classes="procs detail line", markup=False)
        yield Static("", classes="session line", markup=False)
        yield Static("", classes="serving detail line", markup=False)

    def on_mount(self) -> None:
        self._ready = True
        if self._pending:
            self.apply(*self._pending)

    def on_focus(self) -> None:
        self.post_message(self.Selected(self))

    def apply(self, g: GpuSample, s: SessionView | None, snap: HostSnapshot, servers: dict[int, ServerProc],
              now: float, interval: float) -> None:
        """Show one sample of this GPU and the session on it."""
        self.session, self.gpu = s, g
        if snap.sampled_at != self._last_sample:
            self._last_sample = snap.sampled_at
            self.history.append(g.power_w or 0.0)
        if not getattr(self, "_ready", False):
            self._pending = (g, s, snap, servers, now, interval)
            return
        self._pending = None
        title, badge, power, spark, stats, procs, sess, serving = self._parts()
        put(title, f"GPU {g.index} · {clean(g.name or NA, 60)}")
        label, kind = badge_for(s, snap, now, interval)
        badge.set(label, kind)
        self.set_class(kind in ("stale", "unreachable"), "-stale")  # old data looks old
        put(power, power_bar(g.power_w, g.power_limit_w))
        if len(spark.data or []) != len(self.history) or list(spark.data) != list(self.history):
            spark.data = list(self.history)
        put(stats, stats_line(g))
        put(procs, procs_text(g, servers))
        put(sess, session_line(s))
        detail = detail_line(s)
        put(serving, detail)
        serving.set_class(not detail.plain, "-empty")

    def _parts(self) -> tuple:
        if not hasattr(self, "_cached"):
            q = self.query_one
            self._cached = (q(".title", Static), q(Badge), q(".power", Static), q(Sparkline), q(".stats", Static),
                            q(".procs", Static), q(".session", Static), q(".serving", Static))
        return self._cached
