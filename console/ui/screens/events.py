"""The events screen (``v``): what happened on every host, newest first — exits, OOM kills, READY,
launches, acknowledgements (from the run directories and exit records) and what this console saw
(foreign servers appearing and vanishing, refused launches, sessions stopping or failing)."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Static

from console.model import HostEvent, HostView
from console.ops.events import merge, run_dir_events
from console.ui.format import clean, gpu_list, short
from console.ui.widgets.footer import QuietFooter

KINDS = ["all", "failures", "lifecycle", "foreign"]
"""``f`` cycles: every event; exits, OOM kills and failures; launches, READY, stops, acks; foreign servers."""
GROUPS = {
    "failures": {"exited", "oom_kill", "session_failed", "launch_refused", "health_flap", "orphan"},
    "lifecycle": {"launched", "ready", "exited", "session_stopped", "stop_requested", "acknowledged", "action"},
    "foreign": {"foreign_appeared", "foreign_vanished", "orphan"},
}


def host_events(view: HostView) -> list[HostEvent]:
    """One host's events: what the console saw merged with what its run directories record."""
    return merge(view.events, run_dir_events(view.snapshot))


class EventsScreen(Screen):
    """Every host's events, newest first, refreshed once a second."""

    DEFAULT_CSS = """
    EventsScreen { layout: vertical; }
    EventsScreen .screen-title { height: 1; padding: 0 1; background: $panel; color: $text; text-style: bold; }
    EventsScreen DataTable { height: 1fr; }
    EventsScreen .detail { height: auto; max-height: 4; padding: 0 1; border-top: solid $primary; color: $text; }
    """
    BINDINGS = [
        Binding("f", "filter", "Filter", tooltip="all → failures → lifecycle → foreign"),
        Binding("escape,v", "close", "Back", tooltip="back to the GPU panels"),
        Binding("question_mark", "app.help", "Help"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, views: Callable[[], dict[str, HostView]], *, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.views, self.clock = views, clock
        self.flt = "all"
        self.events: list[HostEvent] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("", classes="screen-title", markup=False)
            yield DataTable(cursor_type="row", zebra_stripes=True, id="events")
            yield Static("", classes="detail", markup=False)
        yield QuietFooter()

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns("TIME", "HOST", "GPU", "KIND", "WHAT", "SOURCE")
        self.refresh_rows()
        self.set_interval(1.0, self.refresh_rows)
        self.query_one(DataTable).focus()

    def collect(self) -> list[HostEvent]:
        evs = [e for v in self.views().values() for e in host_events(v)]
        if self.flt != "all":
            evs = [e for e in evs if e.kind in GROUPS[self.flt]]
        return sorted(evs, key=lambda e: e.at, reverse=True)

    def refresh_rows(self, force: bool = False) -> None:
        evs = self.collect()
        self.query_one(".screen-title", Static).update(f"Events · {len(evs)} · filter {self.flt} (f) · newest first")
        if evs == self.events and not force:
            return
        self.events = evs
        t = self.query_one(DataTable)
        row = t.cursor_row
        t.clear()
        for e in evs:
            stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(e.at))
            t.add_row(stamp, clean(e.host, 30), gpu_list(e.gpus) if e.gpus else "", e.kind,
                      short(clean(e.text), 110), e.source)
        if evs and row is not None:
            t.move_cursor(row=min(row, len(evs) - 1))
        self.show_detail()

    def show_detail(self) -> None:
        t = self.query_one(DataTable)
        box = self.query_one(".detail", Static)
        if not self.events or t.cursor_row is None or not 0 <= t.cursor_row < len(self.events):
            box.update("no events yet" if not self.events else "")
            return
        e = self.events[t.cursor_row]
        box.update(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(e.at))} · {e.host} · {e.kind} · "
                   f"from {e.source}\n{clean(e.text)}")

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()

    def action_filter(self) -> None:
        self.flt = KINDS[(KINDS.index(self.flt) + 1) % len(KINDS)]
        self.refresh_rows(force=True)

    def action_close(self) -> None:
        self.dismiss()
