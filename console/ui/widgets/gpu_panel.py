"""One GPU: power bar + sparkline, utilisation, memory, temperature, processes, its session.

Mounted once per GPU and updated in place with :meth:`GpuPanel.apply`; the power history
(60 samples) lives here, one point per new host sample.

One widget per panel, drawn by :meth:`GpuPanel.render` (a layout pass costs in proportion to
widgets, and the compact toggle lays out all 64 panels). Updates are cheap by construction: the
panel is redrawn only when what it shows changes, and asks for a layout pass only when its
number of body lines changes (its height is set in cells), so 64 panels at 1 Hz never reflow
the screen.
"""

from __future__ import annotations

from collections import deque

from textual.content import Content
from textual.geometry import Region
from textual.message import Message
from textual.renderables.text_opacity import TextOpacity
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget

from console.core.server_info import facts_line
from console.model import Advice, GpuSample, HostSnapshot, ServerFacts, ServerProc, SessionView
from console.ui.format import NA, clean, gpu_list, hms, na, short
from console.ui.widgets.badge import BADGE_KINDS, badge_for

BAR = 16
HISTORY = 60
SPARK = "▁▂▃▄▅▆▇█"
PROCS_SHOWN = 2
SPARK_MAX = 60


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


MEM_WARN = 0.85
"""Memory use from which the bar turns to the warning colour (a relaunch may not fit beside it)."""
MEM_CRIT = 0.95
"""Memory use from which it turns to the error colour (the next allocation may fail)."""
BADGE_CLASSES: frozenset[str] = frozenset(f"gpu-panel--badge-{kind}" for kind in BADGE_KINDS)
"""The component classes of the badge colours (``themes/*.tcss``), declared by the widget a panel's ``palette`` is."""
HIST_SHOWN = 20
"""Samples of utilisation, memory, tok/s and queue history drawn beside their figures."""


def mem_style(frac: float) -> str:
    """The theme colour of a memory bar at ``frac`` of the GPU's memory."""
    return "$text-error" if frac >= MEM_CRIT else "$text-warning" if frac >= MEM_WARN else "$text-success"


def mem_line(g: GpuSample, history: list[float] | None = None, *, short_form: bool = False) -> Content:
    """``mem ██████░░ 91% 89,000/97,887 MiB ▁▂▅`` coloured by how full it is (N/A when unknown)."""
    if g.mem_used_mib is None or not g.mem_total_mib:
        used = "N/A" if g.mem_used_mib is None else f"{g.mem_used_mib:,} MiB of N/A"
        return Content.from_markup("mem [$text-muted]$bar[/] $txt", bar="░" * BAR, txt=used)
    frac = max(0.0, min(1.0, g.mem_used_mib / g.mem_total_mib))
    fill = round(frac * BAR)
    style = mem_style(frac)
    spark = spark_text(history or [], 100.0, HIST_SHOWN)
    if short_form:  # compact panels: the figures in GiB, no history
        return Content.from_markup(f"mem [{style}]$fill[/][$text-muted]$empty[/] [{style}]$pct[/] $txt",
                                   fill="█" * fill, empty="░" * (BAR - fill), pct=f"{100 * frac:.0f}%",
                                   txt=f"{g.mem_used_mib / 1024:.0f}/{g.mem_total_mib / 1024:.0f} GiB")
    return Content.from_markup(
        f"mem [{style}]$fill[/][$text-muted]$empty[/] [{style}]$pct[/] $txt  [$text-muted]$spark[/]",
        fill="█" * fill, empty="░" * (BAR - fill), pct=f"{100 * frac:.0f}%",
        txt=f"{g.mem_used_mib:,}/{g.mem_total_mib:,} MiB", spark=spark)


def util_line(g: GpuSample, history: list[float] | None = None) -> Content:
    """``util  87% ▁▃▇█ · 41°C``: utilisation with its history, and the temperature."""
    spark = spark_text(history or [], 100.0, HIST_SHOWN)
    return Content.from_markup("util $u [$text-success]$spark[/] · $t", u=f"{na(g.util_pct, '{:.0f}%'):>4}",
                               spark=spark or "·", t=na(g.temp_c, "{:.0f}°C"))


def serving_line(tps: list[float], queue: list[float]) -> Content:
    """After READY: tok/s and queue history (``tok/s 412 ▂▅▇ · queue 3 ▁▁▃``); empty before any figure."""
    if not tps and not queue:
        return Content("")
    top_q = max(queue or [0.0]) or 1.0
    return Content.from_markup(
        "tok/s $t [$text-success]$ts[/] · queue $q [$text-warning]$qs[/]",
        t=f"{tps[-1]:.0f}" if tps else "N/A", ts=spark_text(tps, max(tps or [1.0]) or 1.0, HIST_SHOWN),
        q=f"{queue[-1]:.0f}" if queue else "N/A", qs=spark_text(queue, top_q, HIST_SHOWN))


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
    if s.state == "stopped":
        return Content(f"stopped by {s.stopped_by or 'an operator'} at {hms(s.ended_at)}")
    if s.pending:
        return Content("launch request sent: waiting for the host to start it")
    m = s.metrics
    if m is None or s.state not in ("ready", "foreign"):
        return Content(f"log: {short(clean(s.line), 300)}" if s.line else "")
    return Content(
        f"{na(m.gen_throughput, '{:.1f}')} tok/s · accept {na(m.accept_len, '{:.2f}')}"
        f" · run {na(m.running_req)} · queue {na(m.queue_req)}"
    )


def facts_content(f: ServerFacts | None, now: float) -> Content:
    """What the server says of itself (``/server_info`` + ``/model_info``), with its age: ``sglang 0.5.23 · EAGLE
    3 steps · accept 2.41 · 12s``; dimmed and marked ``stale`` past three probe periods; empty when none."""
    line = facts_line(f, now)
    if f is None or line is None:
        return Content("")
    return Content.styled(short(clean(line, 300), 200), "$text-disabled" if f.stale(now) else "$text-muted")


def cause_line(s: SessionView) -> Content:
    """A compact panel's last line for a FAILED session: its cause and the first words of its hint (else of its
    decisive line) — ``✗ gpu_oom · lower --max-running-requests or…`` (the panel cuts it at its width)."""
    why = s.hint or s.line or "no decisive log line"
    return Content.from_markup("[$text-error b]✗ $cause[/] · $why", cause=clean(s.cause or "unknown", 40),
                               why=short(clean(why), 200))


def gpu_advice(advice: list[Advice], index: int, s: SessionView | None) -> list[Advice]:
    """The advice about GPU ``index``: given for it, or for the server on it (a tp 2 server's advice
    names its first GPU only), in the advisor's order."""
    def mine(a: Advice) -> bool:
        if a.gpu == index:
            return True
        if s is None:
            return False
        return bool((a.session_id and a.session_id == s.session_id)
                    or (a.pid and s.session_id is None and a.pid == s.launcher_pid))
    return [a for a in advice if mine(a)]


def advice_line(a: Advice | None) -> Content:
    """``⚑ GPU at 67% of its power limit with 8 queued; consider EAGLE/MTP …`` (one line: the panel's CSS cuts it at its width)."""
    if a is None:
        return Content("")
    return Content.from_markup("[$text-warning]⚑ $msg[/] [$text-muted](i)[/]",
                               msg=short(clean(a.message, 300).replace("\n", " "), 200))


def _lines(content: Content | str) -> int:
    text = content.plain if isinstance(content, Content) else content
    return text.count("\n") + 1 if text else 0


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


def body_text(g: GpuSample, s: SessionView | None, servers: dict[int, ServerProc], compact: bool,
              hist: dict[str, list[float]] | None = None, advice: Advice | None = None,
              facts: Content | None = None) -> Content:
    """Memory bar, utilisation, processes (muted), session and its serving/failure detail and serving
    history; compact: the memory bar (with utilisation) and the session (a FAILED one: its cause and hint).

    ``hist``: ``util``, ``mem`` (percent), ``tps``, ``queue`` histories, oldest first.
    ``advice``: the first advice about this GPU, shown in one line last (not in compact panels).
    ``facts``: the READY server's own facts (:func:`facts_content`), below its detail (not in compact panels).
    """
    hist = hist or {}
    if compact:
        parts = [Content.assemble(mem_line(g, short_form=True), f" · util {na(g.util_pct, '{:.0f}%')}")]
    else:
        parts = [mem_line(g, hist.get("mem")), util_line(g, hist.get("util")),
                 Content.styled(procs_text(g, servers), "$text-muted")]
    parts.append(cause_line(s) if compact and s is not None and s.state == "failed" else Content(session_line(s)))
    if not compact:
        detail = detail_line(s)
        if detail.plain:
            parts.append(detail)
        if facts is not None and facts.plain and s is not None and s.state == "ready":
            parts.append(facts)
        if s is not None and s.state in ("ready", "foreign"):
            serving = serving_line(hist.get("tps") or [], hist.get("queue") or [])
            if serving.plain:
                parts.append(serving)
        if advice is not None:
            parts.append(advice_line(advice))
    return Content("\n").join(parts)


def power_line(w: float | None, limit: float | None, history: list[float], width: int) -> Content:
    """``pwr ████░░ 612/700 W`` and the power history (one character per sample, newest right)."""
    bar = power_bar(w, limit)
    pad = max(1, BAR + 17 - bar.cell_length)
    room = min(SPARK_MAX, width - bar.cell_length - pad)
    return Content.assemble(bar, " " * pad, (spark_text(history, limit, room), "$text-success"))


class GpuPanel(Widget, can_focus=True):
    """The panel of GPU ``index`` on ``host``: a title row with the badge, the power line, a body.

    One widget that draws all of it (a layout pass over 64 panels costs in proportion to
    widgets): the badge is a span styled by the component class ``gpu-panel--badge-<kind>``
    (colours per theme in the TCSS) of ``palette``, its host's section: the section declares
    :data:`BADGE_CLASSES` once for all its panels, so a theme change restyles ten component
    classes per host, not per GPU (with 64 panels that was most of ``t``'s restyle). Old data
    is dimmed by :meth:`render_lines`.
    """

    DIM = 0.55
    """Text opacity of the power line and the body of a panel whose data is old."""

    class Selected(Message):
        def __init__(self, panel: GpuPanel) -> None:
            super().__init__()
            self.panel = panel

    def __init__(self, host: str, index: int, *, compact: bool = False, palette: Widget | None = None,
                 **kw) -> None:
        super().__init__(classes="gpu-panel", **kw)
        self.host, self.index = host, index
        self.palette = palette
        """The widget declaring :data:`BADGE_CLASSES` (the host's section); None: badges in plain text."""
        self.compact = compact
        self.session: SessionView | None = None
        self.gpu: GpuSample | None = None
        self.snap: HostSnapshot | None = None
        self.servers: dict[int, ServerProc] = {}
        self.history: deque[float] = deque(maxlen=HISTORY)
        self.hist: dict[str, deque[float]] = {k: deque(maxlen=HISTORY) for k in ("util", "mem", "tps", "queue")}
        """Utilisation and memory (percent) per sample; tok/s and queue of the current session once serving."""
        self._serving_key: str | None = None
        self._last_sample: float | None = None
        self.title_text = f"GPU {index}"
        self.badge: tuple[str, str] = ("IDLE", "idle")
        """(label, kind) of the badge, as :func:`badge_for` decides."""
        self.power: tuple[float | None, float | None, list[float]] | None = None
        self.body = Content("")
        self.stale = False
        self.advice: Advice | None = None
        """The first advice about this GPU (its one line in the body; ``i`` shows them all)."""
        self.facts: ServerFacts | None = None
        """The current session's server facts (``HostView.server_facts``); their line ages in :meth:`age`."""
        self.facts_line = Content("")

    @property
    def badge_label(self) -> str:
        return self.badge[0]

    def on_focus(self) -> None:
        self.post_message(self.Selected(self))

    def set_compact(self, on: bool) -> None:
        """Compact: four lines (title and badge, power, stats, session); no processes or detail."""
        self.compact = on
        if self.gpu is not None:
            self._body(self._body_text())

    def _body_text(self) -> Content:
        assert self.gpu is not None
        return body_text(self.gpu, self.session, self.servers, self.compact, self.histories(), self.advice,
                         self.facts_line)

    def _body(self, content: Content) -> None:
        """Show the body; the height is set here, in cells, so a layout pass never measures text
        (and there is one only when the number of lines changes)."""
        if content == self.body:
            return
        self.body = content
        n = max(1, _lines(content)) + 4  # title row, power line, the border
        if self.styles.height is None or self.styles.height.value != n:
            self.styles.height = n  # asks for a layout pass itself
        self.refresh()

    def apply(self, g: GpuSample, s: SessionView | None, snap: HostSnapshot, servers: dict[int, ServerProc],
              now: float, interval: float, advice: Advice | None = None, facts: ServerFacts | None = None) -> None:
        """Show one sample of this GPU and the session on it (and the first advice about it, its server's facts);
        redraws only when what it shows changes."""
        self.session, self.gpu, self.snap, self.servers, self.advice = s, g, snap, servers, advice
        self.facts, self.facts_line = facts, facts_content(facts, now)
        if snap.sampled_at != self._last_sample:
            self._last_sample = snap.sampled_at
            self.history.append(g.power_w or 0.0)
            self._record(g, s)
        title = f"GPU {g.index} · {clean(g.name or NA, 60)}"
        power = (g.power_w, g.power_limit_w, list(self.history))
        if title != self.title_text or power != self.power:
            self.title_text, self.power = title, power
            self.refresh()  # fixed size: no layout pass
        self.age(snap, now, interval)
        self._body(self._body_text())

    def _record(self, g: GpuSample, s: SessionView | None) -> None:
        """One sample into the histories; tok/s and queue restart with each session (after READY only)."""
        h = self.hist
        if g.util_pct is not None:
            h["util"].append(g.util_pct)
        if g.mem_used_mib is not None and g.mem_total_mib:
            h["mem"].append(100.0 * g.mem_used_mib / g.mem_total_mib)
        key = (s.session_id or f"pid:{s.launcher_pid}") if s is not None else None
        if key != self._serving_key:
            self._serving_key = key
            h["tps"].clear()
            h["queue"].clear()
        m = s.metrics if s is not None and s.state in ("ready", "foreign") else None
        if m is not None:
            if m.gen_throughput is not None:
                h["tps"].append(m.gen_throughput)
            if m.queue_req is not None:
                h["queue"].append(float(m.queue_req))

    def histories(self) -> dict[str, list[float]]:
        return {k: list(v) for k, v in self.hist.items()}

    def age(self, snap: HostSnapshot, now: float, interval: float) -> None:
        """Only what depends on the sample's age: the badge, the dimming of old data, the server facts' age."""
        if self.facts is not None and self.gpu is not None and not self.compact:  # compact panels show none
            line = facts_content(self.facts, now)
            if line != self.facts_line:
                self.facts_line = line
                self._body(self._body_text())
        badge = badge_for(self.session, snap, now, interval)
        stale = badge[1] in ("stale", "unreachable")  # old data looks old
        if badge != self.badge or stale != self.stale:
            self.badge, self.stale = badge, stale
            self.refresh()

    def render(self) -> Content:
        width = self.content_size.width
        label, kind = self.badge
        colours = self._badge_style(kind)
        badge = Content.assemble((" ", colours), (label, colours + Style(bold=True)), (" ", colours))
        title = Content.styled(self.title_text, "bold").truncate(max(0, width - badge.cell_length),
                                                                 ellipsis=True, pad=True)
        power = power_line(self.power[0], self.power[1], self.power[2], width) if self.power else Content("")
        return Content("\n").join([Content.assemble(title, badge), power, self.body])

    def _badge_style(self, kind: str) -> Style:
        """The colours of a badge of ``kind`` in the current theme (its label is bold)."""
        if self.palette is None:
            return Style()
        return Style.from_rich_style(self.palette.get_component_rich_style(f"gpu-panel--badge-{kind}"))

    def render_lines(self, crop: Region) -> list[Strip]:
        """The panel; when its data is old, the power line and the body at 55% text opacity."""
        strips = super().render_lines(crop)
        if not self.stale:
            return strips
        w, h = self.outer_size  # with the border
        left, right = max(0, 1 - crop.x), min(crop.width, w - 1 - crop.x)  # inside the border
        if right <= left:
            return strips
        app = self.app
        out = []
        for y, strip in enumerate(strips, crop.y):
            if 2 <= y < h - 1:  # below the title row, above the bottom border
                mid = Strip(TextOpacity.process_segments(strip.crop(left, right), self.DIM, app.ansi_theme,
                                                         app.native_ansi_color))
                strip = Strip.join([strip.crop(0, left), mid, strip.crop(right)])
            out.append(strip)
        return out
