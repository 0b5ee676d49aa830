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
from functools import cached_property, partial
from pathlib import PurePath
from typing import TYPE_CHECKING, Callable, ClassVar, Iterable

from textual import events
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.command import CommandPalette
from textual.screen import Screen

from console.backend import Backend, DeployBackend
from console.config import ThemeName
from console.model import AuditEntry, HostView, OperationResult
from console.ui.format import clean, short
from console.ui.idle_gc import IdleCollector
from console.ui.log_follow import LogFollower
from console.ui.main_screen import KEYS, MainScreen, allowed
from console.ui.protocols import LogListener
from console.ui.screens.workflow import Workflow
from console.ui.themes import HIGH_CONTRAST, NAMES, TEXTUAL_THEME, ThemeStylesheet, css_paths, css_variables
from console.ui.views import ViewPipeline
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.host_section import HostSection
from console.ui.widgets.key_help import help_keys, help_open, quit_key, toggle_help

if TYPE_CHECKING:
    from textual.timer import Timer

    from console.ui.operations import Operations
    from console.ui.screens.advice import AdviceActions

WARM_THEMES_AFTER_S = 0.5
"""When, after the start, the other themes' CSS starts being parsed (:meth:`MtpConsoleApp._warm_themes`): after the
first views are drawn, not in their way."""
WARM_STEP_S = 0.01
"""Between two turns of parsing another theme's CSS (some 4 ms a turn, 60 ms a theme on a 2-core machine)."""


class MtpConsoleApp(App):
    """The operator console. Build it with :func:`make_app`.

    The GPU panels' screen (:attr:`main`, ``console/ui/main_screen.py``) owns what is drawn there and its keys;
    the app owns the data coming in, the timers, the theme and help keys, and the parts that carry out what a
    key starts: the operations (:attr:`ops`), the screens behind keys (:attr:`workflow`), the advice keys
    (:attr:`advice_actions`), the log follower and the view pipeline. Each part gets the app typed as
    :class:`console.ui.protocols.Console`.
    """

    def say(self, message: str, **kw) -> None:
        """A toast whose text is never parsed as markup (it often quotes remote text)."""
        self.notify(message, markup=False, **kw)

    TITLE = "mtpconsole"
    CSS_PATH: ClassVar[list[str | PurePath]] = [*css_paths()]
    BINDINGS = [
        *help_keys(""),
        quit_key(""),
        Binding("t", "cycle_theme", "Theme", tooltip="dark → light → high contrast", id="cycle_theme"),
    ]
    """Keys of every screen (the GPU panels' screen has its own: ``console.ui.main_screen.KEYS``)."""

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
        self.theme_name: ThemeName = theme
        self.theme_css = ThemeStylesheet(variables=self.get_css_variables())  # no CSS is read yet: none is lost
        self.stylesheet = self.theme_css
        self.register_theme(HIGH_CONTRAST)
        self.set_theme(theme)  # before the DOM exists: no restyle of every widget at mount
        self.main = MainScreen(self, id="_default")
        """The GPU panels' screen (the default screen)."""
        self.idle_gc = IdleCollector()
        """Full garbage collections while the operator is idle (none lands on a keypress)."""
        self.pipeline = ViewPipeline(self)
        self.pending_views = self.pipeline.pending
        self.views = self.pipeline.views
        self.audit_queue: deque[AuditEntry] = deque()
        self.log_follower = LogFollower(self)
        self.workflow = Workflow(self)
        self.log_listeners: list[LogListener] = []
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

    # The GPU panels' screen, as the tests and benches reach it through the app.
    @property
    def selected(self) -> GpuPanel | None:
        """The selected GPU panel (:attr:`main`'s)."""
        return self.main.selected

    @property
    def compact(self) -> bool:
        """Compact mode (:attr:`main`'s)."""
        return self.main.compact

    @property
    def sections(self) -> dict[str, HostSection]:
        return self.main.sections

    def panels(self) -> list[GpuPanel]:
        return self.main.panels()

    def select(self, panel: GpuPanel) -> None:
        self.main.select(panel)

    def section(self, host: str) -> HostSection:
        return self.main.section(host)

    def grid_columns(self, width: int | None = None) -> int:
        return self.main.grid_columns(width)

    def action_next_panel(self, step: int = 1) -> None:
        self.main.action_next_panel(step)

    def action_compact(self) -> None:
        self.main.action_compact()

    # ------------------------------------------------------------------ layout
    def get_default_screen(self) -> Screen:
        return self.main

    def on_mount(self) -> None:
        self.sub_title = "READ-ONLY" if self.read_only else f"{len(self.backend.hosts)} host(s)"
        self.set_interval(0.1, self.apply_views)
        self.set_interval(0.075, self.flush_logs)
        self.set_interval(1.0, self.age_views)
        self.set_interval(0.25, self.spin)
        self.idle_gc.start()
        self.idle_gc.pace_young(asyncio.get_running_loop())
        self.set_interval(1.0, self.idle_gc.tick)
        self.run_worker(self.start_backend(), group="backend", exit_on_error=False)
        self.call_after_refresh(self._start_on_fleet)  # issue 31: a large fleet starts on its overview
        self.set_timer(WARM_THEMES_AFTER_S, self._warm_themes)

    def _start_on_fleet(self) -> None:
        """After the first frame (its module is no part of it): the fleet overview's start-screen rule."""
        from console.ui.screens.fleet import start_rule

        decided = start_rule(self)

        def check() -> None:
            if decided():
                timer.stop()
        timer: Timer = self.set_interval(0.2, check)

    def action_fleet(self) -> None:
        """``f``: the fleet overview (``console/ui/screens/fleet.py``)."""
        from console.ui.screens.fleet import show_fleet

        show_fleet(self)

    async def start_backend(self) -> None:
        try:
            await self.backend.start(self.on_view, self.on_log, self.on_audit)
        except Exception as e:  # the UI stays up and says why
            self.say(f"backend failed to start: {short(clean(str(e)), 300)}", severity="error", timeout=30)
            return
        # What the backend already had (a link started before the UI has its first sample) is shown
        # now, in the frames being laid out, not at the next timer tick.
        self.apply_views()
        if isinstance(self.backend, DeployBackend):  # issue 29: the deployments' rows, read every few seconds
            try:
                await self.backend.watch_deployments(self.pipeline.on_deployment)
            except Exception as e:
                self.say(f"deployments not read: {short(clean(str(e)), 300)}", severity="warning", timeout=10)

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
    def apply_views(self, force: bool = False) -> None:
        """Apply the views pushed since the last tick (see console/ui/views.py)."""
        self.pipeline.apply(force)

    def age_views(self) -> None:
        """Redraw the sample ages (and staleness) of the GPU panels (see console/ui/views.py)."""
        self.pipeline.refresh_ages()

    def on_unmount(self) -> None:
        self.idle_gc.stop()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.MouseDown)):
            self.idle_gc.touched()
        await super().on_event(event)

    def flush_logs(self) -> None:
        if not self.main.live:  # composing, or torn down at exit (the queue is shown once composed)
            return
        if self.audit_queue:
            audit = self.main.audit_pane
            while self.audit_queue:
                audit.add_entry(self.audit_queue.popleft())
        self.log_follower.flush()

    def spin(self) -> None:
        if self.animation_level != "none" and self.main.live:
            self.main.steps.tick()

    def on_resize(self, event: events.Resize) -> None:
        self.main.fit(event.size.width, event.size.height)

    # ------------------------------------------------------------------ themes and help
    def set_theme(self, name: ThemeName) -> None:
        """Our theme ``name``: its ``theme-<name>`` class and its Textual theme, restyled in one pass (the classes
        change without a restyle of their own; the new theme's CSS refresh restyles every widget once)."""
        self.theme_name = name
        self.update_classes({f"theme-{n}": n == name for n in NAMES}, update=False)
        self.theme = TEXTUAL_THEME[name]

    def _warm_themes(self, todo: tuple[ThemeName, ...] | None = None) -> None:
        """After the start, one CSS source a turn (a few ms: never a key's wait): the CSS parsed for every other theme
        (``t`` to a theme then parses only what widget types shown since brought)."""
        todo = tuple(n for n in NAMES if n != self.theme_name) if todo is None else todo
        if todo:
            more = self.theme_css.warm(css_variables(self, todo[0]))
            self.set_timer(WARM_STEP_S, partial(self._warm_themes, todo if more else todo[1:]))

    def action_cycle_theme(self) -> None:
        """``t``: the next theme, named in a toast (with the one after it)."""
        name = NAMES[(NAMES.index(self.theme_name) + 1) % len(NAMES)]
        self.set_theme(name)
        # after the frame that shows the theme: the toast does not delay it
        self.call_after_refresh(self.say, f"theme: {name} (t: {NAMES[(NAMES.index(name) + 1) % len(NAMES)]})",
                                timeout=3)

    def action_help(self) -> None:
        """``?`` / F1: show or hide the key help of the screen on top (``console/ui/widgets/key_help.py``)."""
        toggle_help(self.screen)

    def action_show_help_panel(self) -> None:
        toggle_help(self.screen, True)

    def action_hide_help_panel(self) -> None:
        toggle_help(self.screen, False)

    @property
    def help_shown(self) -> bool:
        """The key help is open on the screen on top."""
        return help_open(self.screen)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Each command once: the keys of ``screen`` (of the screen under the palette when it is the palette) that
        are the console's own — the GPU panels' :data:`~console.ui.main_screen.KEYS`, else the app's — then
        Textual's that they do not cover (its "Theme" and "Keys" are the console's ``t`` and ``?``)."""
        under = self.screen_stack[-2] if isinstance(screen, CommandPalette) and len(self.screen_stack) > 1 else screen
        on_main = under is self.main
        seen: set[str] = set()
        ours = []
        for b in KEYS if on_main else self.BINDINGS:
            if not isinstance(b, Binding):
                continue
            where, _, action = b.action.rpartition(".")
            target: App | MainScreen = self.main if on_main and where != "app" else self
            if action != "quit" and action not in seen and target.check_action(action, ()):
                seen.add(action)
                ours.append(SystemCommand(f"{b.description} ({self.get_key_display(b)})", b.tooltip or b.description,
                                          lambda a=action, t=target: t.run_action(a)))
        covered = {"Theme", "Keys"}
        yield from (c for c in super().get_system_commands(screen) if c.title not in covered)
        yield from ours

    # ------------------------------------------------------------------ read-only
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return allowed(action, self.read_only)

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
