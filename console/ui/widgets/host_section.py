"""One host: its header, one GpuPanel per GPU (mounted once), and what has no GPU.

Each panel shows its GPU's *current session* as the HostView carries it (``HostView.current``,
decided once below the UI by ``console/core/current.py``); nothing here chooses a session.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.containers import Container, Vertical
from textual.widgets import Static

from console.core.text import no_gpus_text
from console.model import DeploymentRow, HostView
from console.ui.format import clean, short
from console.ui.widgets.deploy_row import DeploymentRowView
from console.ui.widgets.gpu_panel import BADGE_CLASSES, GpuPanel, gpu_advice, session_line
from console.ui.widgets.host_header import HostHeader


class HostSection(Vertical):
    """The section of one host. :meth:`apply` updates it in place. It declares the badge colours' component
    classes for its panels (:data:`~console.ui.widgets.gpu_panel.BADGE_CLASSES`)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = set(BADGE_CLASSES)

    def __init__(self, host: str, **kw) -> None:
        super().__init__(classes="host-section", **kw)
        self.host = host
        self.view: HostView | None = None
        self.level = ""
        self.compact, self.columns = False, 1

    def compose(self) -> ComposeResult:
        yield HostHeader()
        yield Static("waiting for the first sample…", classes="host-note", markup=False)
        yield Container(classes="deploy-rows")  # issue 29: one row per deployment on this host, above its panels
        yield Container(classes="gpus")

    def deploy_rows(self) -> list[DeploymentRowView]:
        box = self.query(".deploy-rows")
        return list(box.first().query_children(DeploymentRowView)) if box else []

    def show_deployment(self, row: DeploymentRow, now: float) -> None:
        """Show a deployment's new row (its widget mounted the first time)."""
        view = next((v for v in self.deploy_rows() if v.deployment == row.name), None)
        if view is None:
            view = DeploymentRowView(row.name)
            self.query_one(".deploy-rows", Container).mount(view)
        view.show(row, now)

    def set_compact(self, on: bool, columns: int = 1) -> None:
        """Compact mode: ``columns`` short panels per row (a grid), or back to one full panel per row.

        Done with inline styles on this section's grid and its panels (see MainScreen.set_compact).
        """
        self.compact, self.columns = on, columns
        box = self.query_one(".gpus", Container)
        st = box.styles
        if on:
            if st.layout is None or st.layout.name != "grid":
                st.layout = "grid"
                st.grid_gutter_vertical = 1
                st.grid_rows = "6"  # a compact panel: 4 lines and its border
            if st.grid_size_columns != columns:
                st.grid_size_columns = columns
        else:
            for rule in ("layout", "grid_size_columns", "grid_gutter_vertical", "grid_rows"):
                st.clear_rule(rule)
        for panel in self.panels():
            if panel.compact != on:
                panel.set_compact(on)
        box.refresh(layout=True)

    def panels(self) -> list[GpuPanel]:
        return list(self.query_one(".gpus", Container).query_children(GpuPanel))

    def apply(self, view: HostView, now: float, interval: float) -> bool:
        """Show ``view``; mounts panels for new GPUs, removes panels of vanished ones.
        Returns whether it mounted any."""
        self.view = view
        snap = view.snapshot
        header = self.query(HostHeader)
        if not header:  # the first view can arrive before compose ran: show it right after
            if self.is_attached:
                self.call_after_refresh(self.apply, view, now, interval)
            return False
        self.level = header.first().show(snap, view.counts, now, interval)
        box = self.query_one(".gpus", Container)
        have = {p.index: p for p in self.panels()}
        want = {g.index for g in snap.gpus}
        for idx in set(have) - want:
            if snap.gpus or snap.gpu_source != "none":
                have.pop(idx).remove()
        new = [GpuPanel(self.host, g.index, compact=self.compact, palette=self) for g in snap.gpus if g.index not in have]
        if new:
            box.mount_all(new)
            have.update({p.index: p for p in new})
        servers = {p.pid: p for p in snap.servers}
        latest = {g.index: g for g in snap.gpus}
        current = {c.index: c.session for c in view.current}
        for idx, panel in sorted(have.items()):
            g = latest.get(idx) or panel.gpu  # kept panels of a host that lost its GPU info go STALE
            if g is not None:
                s = current[idx] if idx in current else panel.session  # a GPU no longer sampled keeps its last
                mine = gpu_advice(view.advice, idx, s)
                facts = view.server_facts.get(s.session_id) if s is not None and s.session_id else None
                panel.apply(g, s, snap, servers, now, interval, mine[0] if mine else None, facts)
        note = self._note(view)
        if note != getattr(self, "_note_text", None):
            self._note_text = note
            self.query_one(".host-note", Static).update(note)
        return bool(new)

    def age(self, now: float, interval: float) -> None:
        """Redraw only what depends on the age of the last sample: the header and the badges."""
        for row in self.deploy_rows():
            row.age(now)
        view = self.view
        header = self.query(HostHeader)
        if view is None or not header:  # not composed yet (or being removed): nothing to age
            return
        snap = view.snapshot
        self.level = header.first().show(snap, view.counts, now, interval)
        for panel in self.panels():
            panel.age(panel.snap or snap, now, interval)

    def _note(self, view: HostView) -> str:
        snap, lines = view.snapshot, []
        if not snap.gpus:  # unreachable (and why), waiting, or the agent's reason: said once (core.text)
            lines.append(short(clean(no_gpus_text(snap)), 220))
        indices = {g.index for g in snap.gpus}
        for s in view.sessions:
            if not indices.intersection(s.gpus) and s.state not in ("stopped", "failed"):
                lines.append(f"{s.state.upper()}  {session_line(s)}")
        self.set_class(not lines, "-empty-note")
        return "\n".join(lines)
