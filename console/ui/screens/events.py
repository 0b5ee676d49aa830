"""The events screen (``v``): what happened on every host, newest first — exits, OOM kills,
launches, acknowledgements (from the run directories and exit records) and what this console saw
(foreign servers appearing and vanishing, refused launches, sessions becoming READY, stopping or
failing). A foreign server's vanishing that this console did not cause names the other console on
this machine whose kill the shared audit log holds (read through the backend, only while such an
event is listed)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from textual.binding import Binding
from textual.widgets import DataTable

from console.core.events import KILL_BEFORE_VANISH_S, NOT_BY_THIS_CONSOLE, view_events
from console.model import AuditEntry, HostEvent, HostView
from console.ui.format import clean, gpu_list, short
from console.ui.screens.table import TableScreen, closing

OthersAudit = Callable[[float, tuple[str, ...]], Awaitable[list[AuditEntry]]]
"""The backend's ``others_audit``: other consoles' audit entries of these ops since a time."""

KINDS = ["all", "failures", "lifecycle", "foreign"]
"""``f`` cycles: every event; exits, OOM kills and failures; launches, READY, stops, acks; foreign servers."""
GROUPS = {
    "failures": {"exited", "oom_kill", "session_failed", "launch_refused", "health_flap", "orphan"},
    "lifecycle": {"launched", "ready", "exited", "session_stopped", "stop_requested", "acknowledged", "action"},
    "foreign": {"foreign_appeared", "foreign_vanished", "orphan"},
}


COLUMNS = ["KIND", "WHAT", "GPU", "TIME", "SOURCE", "HOST"]
"""What each row says, what happened first (what is read at 80 columns; the detail box has the full date and text)."""


def event_columns(hosts: int) -> list[str]:
    """The columns drawn for ``hosts`` hosts: HOST only when there is more than one."""
    return [c for c in COLUMNS if c != "HOST" or hosts > 1]


AUDIT_EVERY_S = 3.0
"""While a foreign server's vanishing is not attributed, the shared audit log is read again this often."""


def host_events(view: HostView, others: list[AuditEntry] | None = None) -> list[HostEvent]:
    """One host's events, built where the CLI's are (:func:`console.core.events.view_events`): what the console
    saw (a foreign server's vanishing named after the other console that killed it when ``others``, the audit
    entries of other consoles, show it) merged with what its run directories, its views' causes and its proven
    orphans say."""
    return view_events(view, others or [])


class EventsScreen(TableScreen):
    """Every host's events, newest first, refreshed once a second."""

    TABLE_ID = "events"
    DETAIL_LINES = 4
    BINDINGS = [
        Binding("f", "filter", "Filter", tooltip="all → failures → lifecycle → foreign"),
        *closing("escape,v"),
    ]

    def __init__(self, views: Callable[[], dict[str, HostView]], *, clock: Callable[[], float] = time.time,
                 others_audit: OthersAudit | None = None) -> None:
        super().__init__()
        self.views, self.clock = views, clock
        self.others_audit = others_audit
        """Reads the shared audit log (None: vanished foreign servers stay unattributed)."""
        self.flt = "all"
        self.hosts = 1
        """How many hosts the table was built for (HOST is a column only with several)."""
        self.events: list[HostEvent] = []
        self.others: list[AuditEntry] = []
        """Kills other consoles on this machine sent (the shared audit log), for vanished foreign servers."""
        self._audit_busy = False

    def add_columns(self, table: DataTable) -> None:
        self.hosts = len(self.views())
        table.add_columns(*event_columns(self.hosts))

    def started(self) -> None:
        self.set_interval(AUDIT_EVERY_S, self.read_others)
        self.read_others()

    def read_others(self) -> None:
        """Read the other consoles' kills from the audit log (in the background), only while a listed foreign
        server's vanishing is not attributed to a console."""
        vanished = [e for v in self.views().values() for e in v.events
                    if e.kind == "foreign_vanished" and NOT_BY_THIS_CONSOLE in e.text]
        fetch = self.others_audit
        if not vanished or self._audit_busy or fetch is None:
            return
        self._audit_busy = True
        since = min(e.at for e in vanished) - KILL_BEFORE_VANISH_S

        async def work() -> None:
            try:
                others = await fetch(since, ("kill",))
            except Exception:  # the list stays as it is: unattributed is still true
                return
            finally:
                self._audit_busy = False
            if others != self.others:
                self.others = others
                self.refresh_rows()
        self.run_worker(work(), group="events-audit", exclusive=True, exit_on_error=False)

    def collect(self) -> list[HostEvent]:
        evs = [e for v in self.views().values() for e in host_events(v, self.others)]
        if self.flt != "all":
            evs = [e for e in evs if e.kind in GROUPS[self.flt]]
        return sorted(evs, key=lambda e: e.at, reverse=True)

    def refresh_rows(self, force: bool = False) -> None:
        evs = self.collect()
        self.title_box.update(f"Events · {len(evs)} · filter {self.flt} (f) · newest first")
        if evs == self.events and not force:
            return
        self.events = evs
        t = self.table
        row = t.cursor_row
        t.clear()
        for e in evs:
            cells = {"KIND": e.kind, "WHAT": short(clean(e.text), 110), "GPU": gpu_list(e.gpus) if e.gpus else "",
                     "TIME": time.strftime("%m-%d %H:%M:%S", time.localtime(e.at)), "SOURCE": e.source,
                     "HOST": clean(e.host, 30)}
            t.add_row(*(cells[c] for c in event_columns(self.hosts)))
        if evs and row is not None:
            t.move_cursor(row=min(row, len(evs) - 1))
        self.show_detail()

    def show_detail(self) -> None:
        box = self.detail_box
        i = self.cursor(len(self.events))
        if i is None:
            box.update("no events yet" if not self.events else "")
            return
        e = self.events[i]
        box.update(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(e.at))} · {e.host} · {e.kind} · "
                   f"from {e.source}\n{clean(e.text)}")

    def action_filter(self) -> None:
        self.flt = KINDS[(KINDS.index(self.flt) + 1) % len(KINDS)]
        self.refresh_rows(force=True)
