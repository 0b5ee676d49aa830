"""Host views in, panels out: the app's view pipeline.

The backend pushes one immutable HostView per host, from any thread and at any rate; the
latest per host is parked in ``pending`` and a timer applies it (one ``batch_update`` per tick):
each host's section redraws its header and panels (each GPU's current session comes with the
view), new events are announced, and the log pane is kept on the selected panel's session. At start,
before the operator chooses, the first GPU with a session is selected (else the first GPU).
"""

from __future__ import annotations

from console.core.group import guard_candidates
from console.model import DeploymentRow, HostEvent, HostView
from console.ui.format import clean, hms
from console.ui.protocols import Console
from console.ui.widgets.gpu_panel import GpuPanel


class ViewPipeline:
    """Applies pushed HostViews to the host sections (see the module docstring)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.pending: dict[str, HostView] = {}
        """host → the latest view not applied yet (only the latest counts)."""
        self.views: dict[str, HostView] = {}
        """host → the view shown."""
        self.events_seen: dict[str, HostEvent] = {}
        """host → the newest event already announced."""
        self.auto_selected: GpuPanel | None = None
        """The panel :meth:`first_selection` selected (the operator has not chosen another yet)."""
        self.rows: dict[str, DeploymentRow] = {}
        """deployment -> its latest row not shown yet (issue 29)."""
        self.selection_done = False
        """The start's selection is made: the operator chose, or a panel with a session log was selected."""

    def on_view(self, view: HostView) -> None:
        """Backend callback (any thread): keep only the latest view per host."""
        self.pending[view.snapshot.name] = view

    def on_deployment(self, row: DeploymentRow) -> None:
        """Backend callback: keep only the latest row per deployment (shown at the next tick)."""
        self.rows[row.name] = row

    def apply(self, force: bool = False) -> None:
        """Show what arrived since the last tick (``force``: redraw every host)."""
        console, main = self.console, self.console.main
        if not main.live:  # not composed yet (its mount shows them) or being torn down at exit
            return
        rows = [self.rows.pop(n) for n in list(self.rows)]
        for row in rows:  # issue 29: each deployment's row, above its host's panels
            if main.section(row.host).children:
                main.show_deployment(row)
            else:  # its section is not composed yet: the next tick shows it
                self.rows.setdefault(row.name, row)
        pending = {h: self.pending.pop(h) for h in list(self.pending)}  # pops are atomic
        if force:
            pending = {**self.views, **pending}
        if not pending:
            return
        now = console.clock()
        with console.batch_update():
            mounted = False
            for host, view in pending.items():
                sec = main.section(host)
                if not sec.children:  # not composed yet (a view right at start): the next tick shows it
                    self.pending.setdefault(host, view)
                    continue
                self.views[host] = view
                mounted |= sec.apply(view, now, console.interval)
                self.announce(view)
            main.show_groups(list(self.views.values()))  # issue 30: each multi-node group once, over the hosts
            failed = guard_candidates(s for v in self.views.values() for s in v.sessions)
            if failed:  # a member died while others run: the failure policy (its evidence re-checked on the hosts)
                console.ops.guard_groups(failed)
            self.first_selection()
            console.log_follower.sync(main.selected)
        if mounted:
            console.call_after_refresh(self.freeze_heap)

    def first_selection(self) -> None:
        """At start, until the operator chooses a GPU panel: select (and focus) the first panel whose GPU has a
        session with a log, else one with a server, else the first panel — so the log pane shows what there is
        from the start instead of asking for a selection, and the keys act from there. The start lasts until such a
        session is selected or every host has shown its first view (a host whose first view comes later can still
        bring the first session)."""
        if self.selection_done:
            return
        panels = self.console.main.panels()
        if not panels:
            return
        sel, focused = self.console.main.selected, panels[0].screen.focused
        if (sel is not None and sel is not self.auto_selected) or (focused is not None and focused is not sel):
            self.selection_done = True  # the operator chose (a panel, the filter box...)
            return
        best = (next((p for p in panels if p.session is not None and p.session.session_id), None)
                or next((p for p in panels if p.session is not None), None) or panels[0])
        if best is not sel:
            self.auto_selected = best
            self.console.main.select(best)
            best.focus(scroll_visible=False)
        # the start is over once a session log is shown or every host has shown its first view: a session that
        # appears later (a launch minutes on) never moves the operator's panel
        self.selection_done = (best.session is not None and bool(best.session.session_id)) or \
            set(self.views) >= set(self.console.backend.hosts)

    def refresh_ages(self) -> None:
        """Once a second: the sample ages and what depends on them (staleness), nothing else; nothing while another
        screen (the fleet overview, a table) is on top of the GPU panels — at 512 hosts this tick took 100 ms or more
        and landed in that screen's keys — they are aged when they are shown again (``MainScreen``'s resume)."""
        console = self.console
        if not console.main.shown:
            return
        now = console.clock()
        with console.batch_update():
            for host in self.views:
                section = console.main.section(host)
                if console.main.in_view(section):  # scrolled out: aged on its next tick in view (at 512 hosts
                    section.age(now, console.interval)  # all 4096 panels' redraw took ~450 ms a second on 2 cores)

    def announce(self, view: HostView) -> None:
        """A toast for each new event of a host (foreign servers appearing or vanishing, sessions
        ending); refusals and READY are already reported by the operation's own result (READY is
        listed on the events screen, ``v``)."""
        host, events = view.snapshot.name, view.events
        if not events:
            return
        last = self.events_seen.get(host)
        if last is None:
            new = events
        elif last in events:
            new = events[events.index(last) + 1:]
        else:  # fell out of the bounded list: everything newer than it
            new = [e for e in events if e.at > last.at]
        self.events_seen[host] = events[-1]
        for e in new:
            if e.kind not in ("launch_refused", "ready"):
                self.console.say(f"{hms(e.at)} {host}: {clean(e.text, 300)}",
                             severity="warning" if e.kind in ("foreign_vanished", "session_failed")
                             else "information")

    def freeze_heap(self) -> None:
        """Move what exists once panels are mounted (widgets, styles, caches: most of the heap) out of
        the cyclic garbage collector's sight (no walk now: a collection here cost 300-450 ms at 512 hosts, right
        after the key that mounted them). A full collection otherwise walks all of it: ~100 ms pauses with 64
        panels. Collections run when the operator is idle (``console/ui/idle_gc.py``)."""
        self.console.idle_gc.freeze()
