"""One GPU: power bar + sparkline, utilisation, memory, temperature, processes, its session.

Mounted once per GPU and updated in place with :meth:`GpuPanel.apply`; the power history
(60 samples) lives here, one point per new host sample.

Updates are cheap by construction: a line is redrawn only when its text changes, and a redraw
asks for a layout pass only when the number of lines of a multi-line part changes (every
other part is one line high in the TCSS), so 64 panels at 1 Hz never reflow the screen.
"""

from __future__ import annotations

from collections import deque

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static

from console.model import GpuSample, HostSnapshot, ServerProc, SessionView
from console.ui.format import NA, clean, gpu_list, na, short
from console.ui.widgets.badge import Badge, badge_for

BAR = 16
HISTORY = 60
SPARK = "▁▂▃▄▅▆▇█"
PROCS_SHOWN = 2


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


def procs_text(g: GpuSample, servers: dict[int, ServerProc], limit: int = PROCS_SHOWN) -> str:
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


def _lines(content: Content | str) -> int:
    text = content.plain if isinstance(content, Content) else content
    return text.count("\n") + 1 if text else 0


def put(w: Static, content: Content | str) -> bool:
    """Update ``w`` only when what it shows changes; returns whether it did.

    A layout pass is requested only when the number of lines changes: every part of a panel
    has a fixed width, so a redraw with as many lines cannot change any size.
    """
    old = getattr(w, "_shown", None)
    if old == content:
        return False
    w._shown = content
    w.update(content, layout=old is None or _lines(old) != _lines(content))
    return True


def spark_text(history: list[float], limit: float | None, width: int) -> str:
    """The last ``width`` power samples as block characters, on an absolute 0..limit scale.

    An absolute scale keeps an idle GPU flat (a relative one magnifies 1 W of noise into
    full-height bars) and makes a server coming up read as power rising.
    """
    if width <= 0 or not history:
        return ""
    top = limit or max(history) or 1.0
    out = []
    for w in history[-width:]:
        frac = max(0.0, min(1.0, w / top))
        out.append(SPARK[min(len(SPARK) - 1, int(frac * len(SPARK)))])
    return "".join(out)


def body_text(g: GpuSample, s: SessionView | None, servers: dict[int, ServerProc], compact: bool) -> Content:
    """Stats, processes (muted), session and its serving/failure detail; compact: stats and session."""
    parts = [Content(stats_line(g))]
    if not compact:
        parts.append(Content.styled(procs_text(g, servers), "$text-muted"))
    parts.append(Content(session_line(s)))
    if not compact:
        detail = detail_line(s)
        if detail.plain:
            parts.append(detail)
    return Content("\n").join(parts)


class PowerLine(Widget):
    """``pwr ████░░ 612/700 W`` and the power history (one character per sample, newest right)."""

    DEFAULT_CSS = "PowerLine { height: 1; width: 1fr; }"
    SPARK_MAX = 60

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.state: tuple = ()

    def show(self, w: float | None, limit: float | None, history: list[float]) -> None:
        state = (w, limit, history)
        if state != self.state:
            self.state = state
            self.refresh()  # one line, fixed width: no layout pass

    def render(self) -> Content:
        if not self.state:
            return Content("")
        w, limit, history = self.state
        bar = power_bar(w, limit)
        pad = max(1, BAR + 17 - bar.cell_length)
        room = min(self.SPARK_MAX, self.size.width - bar.cell_length - pad)
        return Content.assemble(bar, " " * pad, (spark_text(history, limit, room), "$text-success"))


class GpuPanel(Widget, can_focus=True):
    """The panel of GPU ``index`` on ``host``: a title row with the badge, the power line, a body.

    Six widgets per panel (a layout pass over 64 panels costs in proportion to widgets).
    """

    class Selected(Message):
        def __init__(self, panel: GpuPanel) -> None:
            super().__init__()
            self.panel = panel

    def __init__(self, host: str, index: int, *, compact: bool = False, **kw) -> None:
        super().__init__(classes="gpu-panel", **kw)
        self.host, self.index = host, index
        self.compact = compact
        self.session: SessionView | None = None
        self.gpu: GpuSample | None = None
        self.snap: HostSnapshot | None = None
        self.servers: dict[int, ServerProc] = {}
        self.history: deque[float] = deque(maxlen=HISTORY)
        self._last_sample: float | None = None
        self._pending: tuple | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(classes="row"):
            yield Static(f"GPU {self.index}", classes="title", markup=False)
            yield Badge()
        yield PowerLine(classes="power")
        yield Static("", classes="body", markup=False)

    def on_mount(self) -> None:
        self._ready = True
        if self._pending:
            self.apply(*self._pending)

    def on_focus(self) -> None:
        self.post_message(self.Selected(self))

    def set_compact(self, on: bool) -> None:
        """Compact: four lines (title and badge, power, stats, session); no processes or detail."""
        self.compact = on
        if getattr(self, "_ready", False) and self.gpu is not None:
            self._body(body_text(self.gpu, self.session, self.servers, on))

    def _body(self, content: Content) -> None:
        """Show the body; heights are set here, in cells, so a layout pass never measures text."""
        body = self._parts()[3]
        if put(body, content):
            n = max(1, _lines(content))
            if body.styles.height is None or body.styles.height.value != n:
                body.styles.height = n
                self.styles.height = n + 4  # title row, power line, the border

    def apply(self, g: GpuSample, s: SessionView | None, snap: HostSnapshot, servers: dict[int, ServerProc],
              now: float, interval: float) -> None:
        """Show one sample of this GPU and the session on it."""
        self.session, self.gpu, self.snap, self.servers = s, g, snap, servers
        if snap.sampled_at != self._last_sample:
            self._last_sample = snap.sampled_at
            self.history.append(g.power_w or 0.0)
        if not getattr(self, "_ready", False):
            self._pending = (g, s, snap, servers, now, interval)
            return
        self._pending = None
        title, _badge, power, _body = self._parts()
        put(title, f"GPU {g.index} · {clean(g.name or NA, 60)}")
        self.age(snap, now, interval)
        power.show(g.power_w, g.power_limit_w, list(self.history))
        self._body(body_text(g, s, servers, self.compact))

    def age(self, snap: HostSnapshot, now: float, interval: float) -> None:
        """Only what depends on the sample's age: the badge and the dimming of old data."""
        if not getattr(self, "_ready", False):
            return
        label, kind = badge_for(self.session, snap, now, interval)
        self._parts()[1].set(label, kind)
        self.set_class(kind in ("stale", "unreachable"), "-stale")  # old data looks old

    def _parts(self) -> tuple:
        if not hasattr(self, "_cached"):
            q = self.query_one
            self._cached = (q(".title", Static), q(Badge), q(PowerLine), q(".body", Static))
        return self._cached
