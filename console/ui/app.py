"""The console's Textual app: host sections with GPU panels, the session log, the steps of
the action in progress and the audit pane. It talks to the data layer only through a
:class:`console.backend.Backend`.

Views and log lines may arrive at any rate (and from any thread): they are parked in plain
containers and applied by timers, at most 10 times a second, one ``batch_update`` per tick.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from functools import cached_property
from pathlib import PurePath
from typing import TYPE_CHECKING, Callable, ClassVar, Iterable

from textual import events
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.command import CommandPalette
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header

from console.backend import Backend
from console.model import AuditEntry, HostView, OperationResult, SessionView
from console.ui.format import clean, short
from console.ui.log_follow import LogFollower
from console.ui.main_screen import MainScreen
from console.ui.screens.workflow import Workflow
from console.ui.themes import HIGH_CONTRAST, NAMES, TEXTUAL_THEME, css_paths
from console.ui.views import ViewPipeline
from console.ui.widgets.audit import AuditPane
from console.ui.widgets.footer import QuietFooter
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.host_section import HostSection
from console.ui.widgets.log_pane import LogPane
from console.ui.widgets.steps import StepsView

if TYPE_CHECKING:
    from console.ui.operations import Operations
    from console.ui.screens.advice import AdviceActions

DESTRUCTIVE = {"launch": "launch", "kill": "kill", "relaunch": "relaunch", "edit": "edit and relaunch"}
MAIN_ONLY = {*DESTRUCTIVE, "select_panel", "filter_log", "wrap_log", "follow_log", "audit", "compact",
             "sessions", "full_log", "orphans", "events", "move_panel", "next_panel", "advice", "report"}
"""Actions of the GPU panels' screen: hidden from the footer and inert while another screen is shown."""
COMPACT_CELL = 44
"""Width of one GPU panel in compact mode (the stats line fits)."""


class HostsPane(VerticalScroll):
    """The scrolling column of host sections; tells the app when its width changes (compact grid)."""

    def on_resize(self) -> None:
        app = self.app
        if isinstance(app, MtpConsoleApp):
            app.set_grid()


class MtpConsoleApp(App):
    """The operator console. Build it with :func:`make_app`."""

    def say(self, message: str, **kw) -> None:
        """A toast whose text is never parsed as markup (it often quotes remote text)."""
        self.notify(message, markup=False, **kw)

    TITLE = "mtpconsole"
    CSS_PATH: ClassVar[list[str | PurePath]] = [*css_paths()]
    BINDINGS = [
        Binding("question_mark", "help", "Help", tooltip="show or hide the key help", id="help"),
        Binding("q", "quit", "Quit", tooltip="quit (servers keep running)", id="quit"),
        Binding("l", "launch", "Launch", tooltip="launch a server on the selected GPU (flag form)", id="launch"),
        Binding("k", "kill", "Kill", tooltip="stop the selected session, confirmed", id="kill"),
        Binding("r", "relaunch", "Relaunch", tooltip="confirmed kill, then launch with the same flags", id="relaunch"),
        Binding("e", "edit", "Edit", tooltip="edit the flags and relaunch", id="edit"),
        Binding("enter", "select_panel", "Select", show=False, tooltip="focus the selected GPU panel", id="select_panel"),
        Binding("slash", "filter_log", "Filter", tooltip="filter the log (hide non-matching lines)", id="filter_log"),
        Binding("w", "wrap_log", "Wrap", tooltip="toggle wrapping of long log lines", id="wrap_log"),
        Binding("end", "follow_log", "Follow", show=False, tooltip="jump to the end of the log and follow it", id="follow_log"),
        Binding("a", "audit", "Audit", tooltip="show or hide the remote commands run", id="audit"),
        Binding("c", "compact", "Compact", tooltip="compact GPU panels", id="compact"),
        Binding("t", "cycle_theme", "Theme", tooltip="dark → light → high contrast", id="cycle_theme"),
        Binding("s", "sessions", "Sessions", tooltip="every session, current and ended: open, acknowledge",
                id="sessions"),
        Binding("z", "full_log", "Full log", tooltip="the log full screen: search, decisive line", id="full_log"),
        Binding("o", "orphans", "Orphans", tooltip="processes of no live server holding GPU memory", id="orphans"),
        Binding("v", "events", "Events", tooltip="exits, OOM kills, READY, actions, with times", id="events"),
        Binding("i", "advice", "Advice", tooltip="the advisor on the selected GPU: evidence, checked change; e edits",
                id="advice"),
        Binding("p", "report", "Report", tooltip="write the incident report of the selected GPU's session",
                id="report"),
        Binding("f1", "help", "Help", show=False, tooltip="show or hide the key help", id="help_f1"),
    ]

    def __init__(self, backend: Backend, *, theme: str = "dark", read_only: bool = False,
                 clock: Callable[[], float] = time.time, interval: float | None = None,
                 keymap: dict[str, str] | None = None) -> None:
        super().__init__()
        if keymap:
            self.set_keymap(keymap)  # action name -> key (config [ui] keymap)
        if theme not in NAMES:
            raise ValueError(f"unknown theme {theme!r} (choose from {', '.join(NAMES)})")
        self.backend = backend
        self.read_only = bool(read_only or backend.read_only)
        self.clock = clock
        self.interval = float(interval or backend.interval or 1.0)
        self.theme_name = theme
        self.register_theme(HIGH_CONTRAST)
        self.set_theme(theme)  # before the DOM exists: no restyle of every widget at mount
        self.pipeline = ViewPipeline(self)
        self.pending_views = self.pipeline.pending
        self.views = self.pipeline.views
        self.sections = self.pipeline.sections
        self.audit_queue: deque[AuditEntry] = deque()
        self.selected: GpuPanel | None = None
        self.log_follower = LogFollower(self)
        self.compact = False
        self.workflow = Workflow(self)
        self.log_listeners: list[Callable[[str, str, list[str]], None]] = []
        """Also told every batch of log lines (the full-screen log)."""

    # Built at first use (a key, a form): their modules (forms, impact, advice screens) are no part of the
    # first frame, which is drawn sooner without importing them at start.
    @cached_property
    def ops(self) -> Operations:
        """Launch, kill, relaunch and edit: their confirmation dialogs, forms and steps."""
        from console.ui.operations import Operations

        return Operations(self)

    @cached_property
    def advice_actions(self) -> AdviceActions:
        """``i`` (the advice detail, then ``e`` from its suggestion) and ``p`` (the incident report)."""
        from console.ui.screens.advice import AdviceActions

        return AdviceActions(self)

    @property
    def following(self) -> tuple[str, str] | None:
        """(host, session id) whose log the log pane shows."""
        return self.log_follower.key

    @property
    def follow_busy(self) -> bool:
        """A log switch is in progress (the new session's tail is on its way)."""
        return self.log_follower.busy

    @property
    def op_busy(self) -> bool:
        return self.ops.busy

    @property
    def results(self) -> list[OperationResult]:
        return self.ops.results

    # ------------------------------------------------------------------ layout
    def get_default_screen(self) -> Screen:
        return MainScreen(id="_default")

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            with HostsPane(id="hosts"):
                for h in self.backend.hosts:
                    self.sections[h] = HostSection(h)
                    yield self.sections[h]
            with Vertical(id="side"):
                yield StepsView(self.clock, id="steps")
                yield LogPane(id="log")
                yield AuditPane(id="audit")
        yield QuietFooter()

    def on_mount(self) -> None:
        self.sub_title = "READ-ONLY" if self.read_only else f"{len(self.backend.hosts)} host(s)"
        self.set_interval(0.1, self.apply_views)
        self.set_interval(0.075, self.flush_logs)
        self.set_interval(1.0, self.pipeline.refresh_ages)
        self.set_interval(0.25, self._spin)
        self.run_worker(self._start_backend(), group="backend", exit_on_error=False)

    async def _start_backend(self) -> None:
        try:
            await self.backend.start(self.on_view, self.on_log, self.on_audit)
        except Exception as e:  # the UI stays up and says why
            self.say(f"backend failed to start: {short(clean(str(e)), 300)}", severity="error", timeout=30)
            return
        # What the backend already had (a link started before the UI has its first sample) is shown
        # now, in the frames being laid out, not at the next timer tick.
        self.apply_views()

    # ------------------------------------------------------------------ data in (any thread)
    def on_view(self, view: HostView) -> None:
        """Backend callback: keep only the latest view per host; applied by a timer — a host's first view
        with GPUs at once (its panels appear with the first sample, not up to a tick later)."""
        first = view.snapshot.gpus and view.snapshot.name not in self.views
        self.pipeline.on_view(view)
        if first:
            try:
                asyncio.get_running_loop()  # the app's own thread: post the apply; from another, the timer does
            except RuntimeError:
                return
            self.call_later(self.apply_views)

    def on_log(self, host: str, session_id: str, lines: list[str]) -> None:
        self.log_follower.on_log(host, session_id, lines)
        for fn in list(self.log_listeners):
            fn(host, session_id, lines)

    def on_audit(self, entry: AuditEntry) -> None:
        self.audit_queue.append(entry)

    # ------------------------------------------------------------------ timers
    def section(self, host: str) -> HostSection:
        return self.pipeline.section(host)

    def apply_views(self, force: bool = False) -> None:
        """Apply the views pushed since the last tick (see console/ui/views.py)."""
        self.pipeline.apply(force)

    def on_unmount(self) -> None:
        self.pipeline.unfreeze_heap()

    def flush_logs(self) -> None:
        if self.audit_queue:
            audit = self.query_one(AuditPane)
            while self.audit_queue:
                audit.add_entry(self.audit_queue.popleft())
        self.log_follower.flush()

    def _spin(self) -> None:
        if self.animation_level != "none":
            self.query_one(StepsView).tick()

    # ------------------------------------------------------------------ selection and log
    def on_gpu_panel_selected(self, message: GpuPanel.Selected) -> None:
        focused = self.focused
        if isinstance(focused, GpuPanel) and focused is not message.panel:
            return  # a focus the keys have already moved past (Tab Tab typed ahead)
        self.select(message.panel)

    def select(self, panel: GpuPanel) -> None:
        if self.selected is not None and self.selected is not panel:
            self.selected.remove_class("selected")
        self.selected = panel
        panel.add_class("selected")
        self.log_follower.sync(panel)

    def find_session(self, host: str, sid: str) -> SessionView | None:
        view = self.views.get(host)
        return next((s for s in view.sessions if s.session_id == sid), None) if view else None

    def panels(self) -> list[GpuPanel]:
        return list(self.query(GpuPanel))

    def action_next_panel(self, step: int = 1) -> None:
        panels = self.panels()
        if not panels:
            return
        i = panels.index(self.selected) if self.selected in panels else -step if step > 0 else 0
        target = panels[(i + step) % len(panels)]
        # Selected now, not when the focus event comes round: keys typed ahead (Tab Tab) each move on.
        self.select(target)
        self._focus_panel(target)

    @staticmethod
    def _focus_panel(panel: GpuPanel) -> None:
        """Focus ``panel`` and scroll the hosts pane only as far as needed to show it.

        Textual's own focus scroll centres a widget that the last frame did not show entirely;
        right after a layout change (the first tab after start) that frame can be out of date,
        and the pane jumped by a few lines with the panel already in view.
        """
        panel.focus(scroll_visible=False)
        panel.scroll_visible(animate=False)

    def action_select_panel(self) -> None:
        p = self.selected
        if p is None or not p.is_attached:
            self.action_next_panel(1)
            return
        self._focus_panel(p)
        self.log_follower.sync(p)  # explicit: show the session there now

    def action_filter_log(self) -> None:
        self.query_one(LogPane).open_filter()

    def action_wrap_log(self) -> None:
        self.query_one(LogPane).toggle_wrap()

    def action_follow_log(self) -> None:
        self.query_one(LogPane).follow()

    def action_audit(self) -> None:
        self.query_one(AuditPane).toggle_class("-shown")

    def on_resize(self, event: events.Resize) -> None:
        self.workflow.fit(event.size.width, event.size.height)
        self.fit_help()

    def action_compact(self) -> None:
        """Compact mode: short panels in a grid, as many columns as the width allows."""
        self.workflow.user_compact = True  # the operator chose: no more automatic switching
        self._toggle_compact()

    def _toggle_compact(self) -> None:
        self.compact = not self.compact
        with self.batch_update():
            # Inline styles, not a class on #hosts: a class there restyles every widget below it
            # (~100 with 64 panels), this touches two containers per host and one widget per panel.
            for sec in self.sections.values():
                sec.set_compact(self.compact, self.grid_columns())

    def grid_columns(self, width: int | None = None) -> int:
        """GPU panels per row in compact mode for a hosts pane ``width`` cells wide."""
        if width is None:
            width = self.query_one("#hosts").size.width or self.size.width
        return max(1, min(8, (width - 1) // COMPACT_CELL))

    def set_grid(self) -> None:
        if not self.compact:
            return
        n = self.grid_columns()
        for sec in self.sections.values():
            sec.set_compact(True, n)

    # ------------------------------------------------------------------ themes and help
    def set_theme(self, name: str) -> None:
        self.theme_name = name
        self.theme = TEXTUAL_THEME[name]
        for n in NAMES:
            self.set_class(n == name, f"theme-{n}")

    def action_cycle_theme(self) -> None:
        self.set_theme(NAMES[(NAMES.index(self.theme_name) + 1) % len(NAMES)])

    def action_help(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    def action_show_help_panel(self) -> None:
        super().action_show_help_panel()
        self.fit_help()

    def action_hide_help_panel(self) -> None:
        super().action_hide_help_panel()
        self.fit_help(helping=False)  # the panel leaves the DOM after this call

    def fit_help(self, helping: bool | None = None) -> None:
        """While the key help is open beside too narrow a main view (80x24), the log pane steps aside for it:
        squeezed below their minimum widths the GPU panels would be laid out off screen."""
        screen = self.screen
        if not isinstance(screen, MainScreen):
            return
        helping = bool(screen.query("HelpPanel")) if helping is None else helping
        need = sum(int(w.styles.min_width.value) if w.styles.min_width else 0 for w in screen.query("#hosts, #side"))
        help_w = min(60, max(30, self.size.width // 3))  # Textual's HelpPanel: 33 %, at least 30, at most 60
        screen.set_class(helping and self.size.width - help_w < need, "-help-narrow")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Each command once: the console's own key actions, then Textual's that they do not cover
        (its "Theme" and "Keys" are the console's ``t`` and ``?``)."""
        seen: set[str] = set()
        ours = []
        for b in self.BINDINGS:
            if (isinstance(b, Binding) and b.action != "quit" and b.action not in seen
                    and self.check_action(b.action, ())):
                seen.add(b.action)
                ours.append(SystemCommand(f"{b.description} ({b.key})", b.tooltip or b.description,
                                          lambda a=b.action: self.run_action(a)))
        covered = {"Theme", "Keys"}
        yield from (c for c in super().get_system_commands(screen) if c.title not in covered)
        yield from ours

    # ------------------------------------------------------------------ read-only
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in MAIN_ONLY and not isinstance(self.screen, (MainScreen, CommandPalette)):
            return False  # another screen (a table, the full log, a form, a dialog): its own keys only
        if action in DESTRUCTIVE and self.read_only:
            return None  # shown disabled in the footer; the key falls through to _refuse
        return True

    def _refuse(self, action: str) -> None:
        if self.read_only and isinstance(self.screen, MainScreen):
            self.say(f"read-only: {DESTRUCTIVE[action]} disabled", severity="warning")

    def key_l(self) -> None:
        self._refuse("launch")

    def key_k(self) -> None:
        self._refuse("kill")

    def key_r(self) -> None:
        self._refuse("relaunch")

    def key_e(self) -> None:
        self._refuse("edit")

    # ------------------------------------------------------------------ actions
    def action_launch(self) -> None:
        self.ops.launch()

    def action_kill(self) -> None:
        self.ops.kill()

    def action_relaunch(self) -> None:
        self.ops.relaunch()

    def action_edit(self) -> None:
        self.ops.edit()

    def action_sessions(self) -> None:
        self.workflow.sessions()

    def action_full_log(self) -> None:
        self.workflow.full_log()

    def action_orphans(self) -> None:
        self.workflow.orphans()

    def action_events(self) -> None:
        self.workflow.events()

    def action_advice(self) -> None:
        self.advice_actions.show()

    def action_report(self) -> None:
        self.advice_actions.report()

    def action_move_panel(self, dx: int, dy: int) -> None:
        self.workflow.move(dx, dy)

    async def action_quit(self) -> None:
        try:
            await asyncio.wait_for(self.backend.stop(), 5)
        except Exception:
            pass
        self.exit()


def make_app(backend: Backend, *, theme: str = "dark", read_only: bool = False,
             clock: Callable[[], float] = time.time, interval: float | None = None,
             keymap: dict[str, str] | None = None) -> MtpConsoleApp:
    """The app for ``backend``; shared by the CLI and the tests."""
    return MtpConsoleApp(backend, theme=theme, read_only=read_only, clock=clock, interval=interval, keymap=keymap)
