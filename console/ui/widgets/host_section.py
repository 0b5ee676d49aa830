"""One host: its header, one GpuPanel per GPU (mounted once), and what has no GPU."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Container, Vertical
from textual.widgets import Static

from console.model import HostView, SessionView
from console.ui.format import clean, short
from console.ui.widgets.gpu_panel import GpuPanel, session_line
from console.ui.widgets.host_header import HostHeader

_ORDER = {"launching": 0, "loading": 0, "stopping": 0, "ready": 1, "foreign": 2, "failed": 3, "stopped": 4}


def session_for_gpu(sessions: list[SessionView], index: int) -> SessionView | None:
    """The session to show on a GPU: live ones first, then the latest failed/stopped."""
    on = [s for s in sessions if index in s.gpus]
    if not on:
        return None
    return min(on, key=lambda s: (_ORDER.get(s.state, 5), -(s.started_at or 0)))


class HostSection(Vertical):
    """The section of one host. :meth:`apply` updates it in place."""

    def __init__(self, host: str, **kw) -> None:
        super().__init__(classes="host-section", **kw)
        self.host = host
        self.view: HostView | None = None
        self.level = ""

    def compose(self) -> ComposeResult:
        yield HostHeader()
        yield Static("waiting for the first sample…", classes="host-note", markup=False)
        yield Container(classes="gpus")

    def panels(self) -> list[GpuPanel]:
        return list(self.query(GpuPanel))

    def apply(self, view: HostView, now: float, interval: float) -> None:
        """Show ``view``; mounts panels for new GPUs, removes panels of vanished ones."""
        self.view = view
        snap = view.snapshot
        self.level = self.query_one(HostHeader).show(snap, view.sessions, now, interval)
        box = self.query_one(".gpus", Container)
        have = {p.index: p for p in self.panels()}
        want = {g.index for g in snap.gpus}
        for idx in set(have) - want:
            if snap.gpus or snap.gpu_source != "none":
                have.pop(idx).remove()
        new = [GpuPanel(self.host, g.index) for g in snap.gpus if g.index not in have]
        if new:
            box.mount_all(new)
            have.update({p.index: p for p in new})
        servers = {p.pid: p for p in snap.servers}
        latest = {g.index: g for g in snap.gpus}
        for idx, panel in sorted(have.items()):
            g = latest.get(idx) or panel.gpu  # kept panels of a host that lost its GPU info go STALE
            if g is not None:
                panel.apply(g, session_for_gpu(view.sessions, idx), snap, servers, now, interval)
        self.query_one(".host-note", Static).update(self._note(view))

    def _note(self, view: HostView) -> str:
        snap, lines = view.snapshot, []
        if not snap.gpus:
            if snap.gpu_error:
                lines.append(f"no GPU information: {short(clean(snap.gpu_error), 200)}")
            elif snap.received_at is None:
                lines.append("waiting for the first sample…")
            else:
                lines.append(f"no GPU information (source: {snap.gpu_source})")
        indices = {g.index for g in snap.gpus}
        for s in view.sessions:
            if not indices.intersection(s.gpus) and s.state not in ("stopped",):
                lines.append(f"{s.state.upper()}  {session_line(s)}")
        self.set_class(not lines, "-empty-note")
        return "\n".join(lines)
