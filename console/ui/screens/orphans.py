"""The orphan hunter screen (``o``): processes of no live server that hold GPU memory or look like
server workers, on every host: proven orphans with the evidence that proves each, then foreign ones (not
proven: another user's, started by a live wrapper...) with why they are not killable here; ``k`` kills a
proven orphan after the Cancel-focused confirm dialog (the kill re-proves it, then confirms step by step)."""

from __future__ import annotations

from collections.abc import Callable

from textual.binding import Binding
from textual.content import Content
from textual.widgets import DataTable

from console.core.orphans import Foreign, Orphan, hunt_snapshot
from console.model import HostView, KillTarget
from console.ui.format import clean, short
from console.ui.screens.confirm import ConfirmScreen
from console.ui.screens.impact import orphan_lines
from console.ui.screens.table import TableScreen, closing

OnKill = Callable[[Orphan, KillTarget], None]
COLUMNS = ["STATE", "WHY (first reason)", "GPU MEMORY", "PID", "TITLE", "HOST"]
"""What each row says: proven ORPHAN or FOREIGN and why first (what is read at 80 columns)."""


def orphan_columns(hosts: int) -> list[str]:
    """The columns drawn for ``hosts`` hosts: HOST only when there is more than one."""
    return [c for c in COLUMNS if c != "HOST" or hosts > 1]


class OrphanScreen(TableScreen):
    """Every suspected orphan of every host; refreshed from the app's views once a second."""

    TABLE_ID = "orphans"
    HEADING = "Orphans: processes of no live server (proven orphans first, then foreign ones)"
    DETAIL_LINES = 12
    BINDINGS = [
        Binding("k", "kill", "Kill", tooltip="kill the selected orphan (confirmed)"),
        *closing("escape,o"),
    ]

    def __init__(self, views: Callable[[], dict[str, HostView]], on_kill: OnKill, *, read_only: bool = False) -> None:
        super().__init__()
        self.views, self.on_kill, self.read_only = views, on_kill, read_only
        self.hosts = 1
        """How many hosts the table was built for (HOST is a column only with several)."""
        self.orphans: list[Orphan | Foreign] = []

    def add_columns(self, table: DataTable) -> None:
        self.hosts = len(self.views())
        table.add_columns(*orphan_columns(self.hosts))

    def find(self) -> list[Orphan | Foreign]:
        out: list[Orphan | Foreign] = []
        for view in self.views().values():
            if view.snapshot.connection.state == "connected":
                live = {s.session_id for s in view.sessions if s.session_id and s.state not in ("failed", "stopped")}
                rep = hunt_snapshot(view.snapshot, live_ids=live)
                out.extend(rep.orphans)
                out.extend(rep.foreign)
        return out

    def refresh_rows(self) -> None:
        found = self.find()
        if [(o.host, o.pid, o.start_ticks, o.evidence, type(o)) for o in found] == \
                [(o.host, o.pid, o.start_ticks, o.evidence, type(o)) for o in self.orphans] and self.orphans:
            return
        t = self.table
        keep = self.selected()
        self.orphans = found
        t.clear()
        for o in found:
            held = ", ".join(f"GPU {i} {m:,} MiB" for i, m in sorted(o.gpu_mem_mib.items())) or "none"
            why = o.why if isinstance(o, Foreign) else (o.evidence[0] if o.evidence else "")
            cells = {"STATE": "FOREIGN" if isinstance(o, Foreign) else "ORPHAN", "WHY (first reason)": short(clean(why), 80),
                     "GPU MEMORY": held, "PID": str(o.pid), "TITLE": short(clean(o.title), 40), "HOST": clean(o.host, 40)}
            t.add_row(*(cells[c] for c in orphan_columns(self.hosts)), key=f"{o.host}:{o.pid}:{o.start_ticks}")
        if keep is not None:
            idx = next((i for i, o in enumerate(found) if (o.host, o.pid) == (keep.host, keep.pid)), None)
            if idx is not None:
                t.move_cursor(row=idx)
        self.show_detail()

    def selected(self) -> Orphan | Foreign | None:
        i = self.cursor(len(self.orphans))
        return None if i is None else self.orphans[i]

    def show_detail(self) -> None:
        box = self.detail_box
        o = self.selected()
        if o is None:
            box.update("no orphans: every server process and GPU memory holder belongs to a live server"
                       if not self.orphans else "")
            return
        if isinstance(o, Foreign):
            box.update(Content("\n".join([f"pid {o.pid} of {o.user or '?'}: not proven an orphan, not killable here",
                                          f"why: {clean(o.why)}", *[f"  - {clean(e)}" for e in o.evidence]])))
            return
        box.update(Content("\n".join(orphan_lines(o))))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Read-only: ``k`` is not offered (hidden from the footer, the key help and the palette)."""
        return not (action == "kill" and self.read_only)

    def key_k(self) -> None:
        """``k`` read-only (its binding is hidden, so the key reaches here): say why nothing happens."""
        if self.read_only:
            self.app.notify("read-only: kill disabled", severity="warning", markup=False)

    def action_kill(self) -> None:
        o = self.selected()
        if o is None:
            self.app.notify("no orphan selected", severity="warning", markup=False)
            return
        if isinstance(o, Foreign):
            self.app.notify(f"pid {o.pid} is not proven an orphan: {o.why}", severity="warning", markup=False)
            return
        target = KillTarget(host=o.host, pid=o.pid, start_ticks=o.start_ticks, port=o.port, as_orphan=True)
        lines = [*orphan_lines(o), "", "then checks: gone · no process of it left · GPU memory released · port closed"]
        def confirmed(ok: bool | None) -> None:
            if ok:
                self.dismiss()
                self.on_kill(o, target)
        self.app.push_screen(ConfirmScreen(f"Kill orphan pid {o.pid}?", lines, "Kill"), callback=confirmed)
