"""The GPU panels' screen: the host sections with their GPU panels, the steps, log and audit panes beside
them, and the keys that act on the selected panel.

It owns what is on it: the composition, which panel is selected (the log pane shows that panel's current
session), the compact grid and moving between panels. Its keys (:data:`KEYS`) act only while it is on top:
another screen (a table, the full log, a form, a dialog) has its own. What a key starts — an operation, a
screen behind a key, the advice — is carried out by the app's parts, reached through
:class:`~console.ui.protocols.Console`.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.command import CommandPalette
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.dom import NoScreen
from textual.errors import NoWidget
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Header

from console.model import DeploymentRow, HostView
from console.ui.protocols import Console
from console.ui.widgets.audit import AuditPane
from console.ui.widgets.deploy_row import DeploymentRowView
from console.ui.widgets.footer import QuietFooter
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.groups_bar import GroupsBar
from console.ui.widgets.host_section import HostSection
from console.ui.widgets.key_help import help_keys, quit_key
from console.ui.widgets.log_pane import LogPane
from console.ui.widgets.steps import StepsView

DESTRUCTIVE = {"launch": "launch", "kill": "kill", "relaunch": "relaunch", "edit": "edit and relaunch",
               "abort": "abort launch", "roll_deployment": "roll"}
"""The actions that change a host (refused in read-only mode), and how the refusal names them."""
PANEL_ACTIONS = {"launch", "kill", "relaunch", "edit", "abort", "advice", "report"}
"""The keys that act on the selected GPU panel: disabled while a deployment row has the focus."""
COMPACT_CELL = 44
"""Width of one GPU panel in compact mode (the stats line fits)."""
SMALL = (100, 30)
"""Below this many columns or rows the GPU panels go compact by themselves (until ``c`` is pressed)."""
STACK_BELOW = 100
"""Below this many columns the steps, log and audit panes go under the GPU panels at the full width: beside them
the log pane had some 30 columns, too few to read a line of it."""
MOVE = "move between the GPU panels"

KEYS = [
    *help_keys(),
    Binding("l", "launch", "Launch", tooltip="launch a server on the selected GPU (flag form)", id="launch"),
    Binding("k", "kill", "Kill", tooltip="stop the selected session, confirmed", id="kill"),
    Binding("r", "relaunch", "Relaunch", tooltip="confirmed kill, then launch with the same flags", id="relaunch"),
    Binding("e", "edit", "Edit", tooltip="edit the flags and relaunch", id="edit"),
    Binding("x", "abort", "Abort launch", show=False, id="abort",
            tooltip="abort the launch in progress on the selected GPU: kill its process group now, confirmed"),
    Binding("h", "probe_lines", "Probe lines", show=False, id="probe_lines",
            tooltip="show or fold the console's own GET /metrics and /health lines in the log"),
    Binding("s", "sessions", "Sessions", tooltip="every session, current and ended: open, acknowledge",
            id="sessions"),
    Binding("z", "full_log", "Full log", tooltip="the log full screen: search, decisive line", id="full_log"),
    Binding("o", "orphans", "Orphans", tooltip="processes of no live server holding GPU memory", id="orphans"),
    Binding("v", "events", "Events", tooltip="exits, OOM kills, READY, actions, with times", id="events"),
    Binding("f", "app.fleet", "Fleet", show=False, tooltip="the fleet overview: one line per host, trouble first",
            id="fleet"),
    Binding("i", "advice", "Advice", tooltip="the advisor on the selected GPU: evidence, checked change; e edits",
            id="advice"),
    Binding("p", "report", "Report", tooltip="write the incident report of the selected GPU's session",
            id="report"),
    Binding("enter", "select_panel", "Select", show=False, tooltip="focus the selected GPU panel", id="select_panel"),
    Binding("slash", "filter_log", "Filter", tooltip="filter the log (hide non-matching lines)", id="filter_log"),
    Binding("w", "wrap_log", "Wrap", tooltip="toggle wrapping of long log lines", id="wrap_log"),
    Binding("end", "follow_log", "Follow", show=False, tooltip="jump to the end of the log and follow it", id="follow_log"),
    Binding("a", "audit", "Audit", tooltip="show or hide the remote commands run", id="audit"),
    Binding("c", "compact", "Compact", tooltip="compact GPU panels", id="compact"),
    Binding("t", "app.cycle_theme", "Theme", tooltip="dark → light → high contrast", id="cycle_theme"),
    quit_key(),
]
"""The keys of this screen, in the footer's order (also the command palette's: ``MtpConsoleApp.get_system_commands``):
the key help first (``? Keys``: where every key the footer has no room for is), then what acts on a GPU, the screens
behind keys, the panes — what an 80-column footer shows is what matters most. The app's own keys (help, quit, theme)
are here again so that the footer keeps this order; the app binds them too, for every other screen."""


def allowed(action: str, read_only: bool) -> bool:
    """Whether ``action`` may run: False for a destructive one in read-only mode, which hides it from the footer, the
    key help and the command palette (its key still says why it does nothing: :meth:`MainScreen.refuse`)."""
    return not (read_only and action in DESTRUCTIVE)


class HostsPane(VerticalScroll, can_focus=False, inherit_bindings=False):
    """The scrolling column of host sections; a new width re-fits the compact grid. It takes no focus and binds no
    keys: the arrows move between the GPU panels in it (its scrolling keys came first in every panel's binding chain,
    so ↑ ↓ ← → scrolled instead); the selected panel is scrolled into view, the wheel scrolls it too."""

    def on_resize(self) -> None:
        screen = self.screen
        if isinstance(screen, MainScreen):
            screen.set_grid()


class MainScreen(Screen):
    """The default screen (see the module docstring); ``tab`` moves between GPU panels rather than every widget."""

    AUTO_FOCUS = ".gpu-panel"
    """Only a GPU panel takes the focus by itself (none exists at mount: the first view selects and focuses one,
    ``console/ui/views.py``); the steps pane, which scrolls, took it at start and kept the keys from the panels."""
    BINDINGS = [
        Binding("tab", "next_panel(1)", "Next GPU", show=False, tooltip=MOVE),
        Binding("shift+tab", "next_panel(-1)", "Previous GPU", show=False, tooltip=MOVE, key_display="⇧tab"),
        Binding("left", "move_panel(-1, 0)", "Previous GPU", show=False, tooltip=MOVE),
        Binding("right", "move_panel(1, 0)", "Next GPU", show=False, tooltip=MOVE),
        Binding("up", "move_panel(0, -1)", "GPU above", show=False, tooltip=MOVE),
        Binding("down", "move_panel(0, 1)", "GPU below", show=False, tooltip=MOVE),
        *KEYS,
    ]

    def __init__(self, console: Console, **kw) -> None:
        super().__init__(**kw)
        self.console = console
        self.sections: dict[str, HostSection] = {}
        """host → its section, filled at compose (a DOM query per host per apply was the top cost)."""
        self._selected: GpuPanel | None = None
        self.compact = False
        """Compact mode: short panels in a grid (``c``, or a small terminal)."""
        self.user_compact = False
        """The operator toggled compact mode: the terminal size no longer decides."""
        self.composed = False
        """The host sections exist (set once composed, at mount)."""
        self.groups_bar = GroupsBar(id="groups")
        """The multi-node groups' line, held like the sections (no query per apply)."""
        self.stacked = False
        """The panes are under the GPU panels (a narrow terminal, :data:`STACK_BELOW`)."""

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            with HostsPane(id="hosts"):
                yield self.groups_bar  # a multi-node group once, over the host sections (issue 30)
                for h in self.console.backend.hosts:
                    self.sections[h] = HostSection(h)
                    yield self.sections[h]
            with Vertical(id="side"):
                yield StepsView(self.console.clock, id="steps")
                yield LogPane(id="log")
                yield AuditPane(id="audit")
        yield QuietFooter()

    def on_mount(self) -> None:
        self.composed = True
        if self.stacked:  # the terminal was narrow before the panes were composed
            self._stack(True)
        if self.compact:  # the terminal was small before the sections were composed
            self.set_grid()
        self.console.apply_views()  # what arrived while composing: in the first frame

    @property
    def live(self) -> bool:
        """Composed and not being torn down. At exit Textual removes the screen's widgets, children first, while the
        app's timers still tick: a view applied then met a section whose groups' line was already gone (the CI run
        of 8e5627b). Textual's ``display`` reads false from the moment the screen is pruned or closed."""
        return self.composed and self.display

    @property
    def shown(self) -> bool:
        """On top, or only under screens whose background lets it through (Textual's ``is_current`` counts it as
        current under any one screen, the fleet overview's opaque table included)."""
        stack = self.app.screen_stack
        return self.live and self in stack and all(s.styles.background.a < 1 for s in stack[stack.index(self) + 1:])

    def on_screen_resume(self) -> None:
        """On top again (the fleet overview or a table closed): the ages, not redrawn under another screen."""
        if self.composed:  # after its first frame: at 512 hosts this takes 100 ms or more
            self.console.call_after_refresh(self.console.age_views)

    @property
    def steps(self) -> StepsView:
        return self.query_one(StepsView)

    @property
    def log_pane(self) -> LogPane:
        return self.query_one(LogPane)

    @property
    def audit_pane(self) -> AuditPane:
        return self.query_one(AuditPane)

    def show_groups(self, views: list[HostView]) -> None:
        """Each multi-node group once, over the host sections (issue 30: :class:`GroupsBar`)."""
        self.groups_bar.show(views)

    def show_deployment(self, row: DeploymentRow) -> None:
        """A deployment's row (issue 29), above its host's GPU panels."""
        self.section(row.host).show_deployment(row, self.console.clock())

    def in_view(self, widget: Widget) -> bool:
        """Some of ``widget`` lies in the screen's visible part (not scrolled out of its container)."""
        try:
            geo = self.find_widget(widget)
        except (NoWidget, NoScreen):
            return False
        return geo.region.overlaps(geo.clip)

    def section(self, host: str) -> HostSection:
        """The section of ``host``; a host the backend did not list at start gets one now."""
        sec = self.sections.get(host)
        if sec is None:
            sec = self.sections[host] = HostSection(host)
            self.query_one("#hosts").mount(sec)
            self.call_after_refresh(self.set_grid)
        return sec

    # ------------------------------------------------------------------ selection
    @property
    def selected(self) -> GpuPanel | None:
        return self._selected

    def panels(self) -> list[GpuPanel]:
        return list(self.query(GpuPanel))

    def on_gpu_panel_selected(self, message: GpuPanel.Selected) -> None:
        focused = self.focused
        if isinstance(focused, GpuPanel) and focused is not message.panel:
            return  # a focus the keys have already moved past (Tab Tab typed ahead)
        self.select(message.panel)

    def select(self, panel: GpuPanel) -> None:
        if self._selected is not None and self._selected is not panel:
            self._selected.remove_class("selected")
        self._selected = panel
        panel.add_class("selected")
        self.console.log_follower.sync(panel)

    @staticmethod
    def focus_panel(panel: GpuPanel) -> None:
        """Focus ``panel`` and scroll the hosts pane only as far as needed to show it.

        Textual's own focus scroll centres a widget that the last frame did not show entirely;
        right after a layout change (the first tab after start) that frame can be out of date,
        and the pane jumped by a few lines with the panel already in view.
        """
        panel.focus(scroll_visible=False)
        panel.scroll_visible(animate=False)

    # ------------------------------------------------------------------ navigation
    def stops(self) -> list[GpuPanel | DeploymentRowView]:
        """What tab and the arrows move between, in screen order: each host's deployment rows, then its panels."""
        out: list[GpuPanel | DeploymentRowView] = []
        for sec in self.sections.values():
            out += [*sec.deploy_rows(), *sec.panels()]
        return out

    def _at(self) -> GpuPanel | DeploymentRowView | None:
        """Where the keys are: a focused deployment row, else the selected panel."""
        f = self.focused
        return f if isinstance(f, DeploymentRowView) else self._selected

    def go(self, target: GpuPanel | DeploymentRowView) -> None:
        """Move to ``target``: a panel is selected now (not when the focus event comes round: keys typed ahead,
        Tab Tab, each move on) and focused; a deployment row is focused (the log pane keeps the selected panel)."""
        if isinstance(target, GpuPanel):
            self.select(target)
            self.focus_panel(target)
        else:
            target.focus(scroll_visible=False)
            target.scroll_visible(animate=False)

    def action_next_panel(self, step: int = 1) -> None:
        stops = self.stops()
        if not stops:
            return
        at = self._at()
        i = stops.index(at) if at in stops else -step if step > 0 else 0
        self.go(stops[(i + step) % len(stops)])

    def action_move_panel(self, dx: int, dy: int) -> None:
        """Arrow keys between GPU panels: left/right one panel, up/down one row of the grid."""
        stops, at = self.stops(), self._at()
        if at not in stops:
            self.action_next_panel(1)
            return
        if dy and self.compact and isinstance(at, GpuPanel):  # a row of the grid up or down: among the panels
            panels = self.panels()
            j = panels.index(at) + dy * self.grid_columns()
            if 0 <= j < len(panels):
                self.go(panels[j])
            return
        i = stops.index(at) + (dx or dy)
        if 0 <= i < len(stops):
            self.go(stops[i])

    def action_select_panel(self) -> None:
        p = self._selected
        if p is None or not p.is_attached:
            self.action_next_panel(1)
            return
        self.focus_panel(p)
        self.console.log_follower.sync(p)  # explicit: show the session there now

    # ------------------------------------------------------------------ the compact grid
    def action_compact(self) -> None:
        """Compact mode: short panels in a grid, as many columns as the width allows."""
        self.user_compact = True  # the operator chose: no more automatic switching
        self.set_compact(not self.compact)

    def set_compact(self, on: bool) -> None:
        self.compact = on
        with self.app.batch_update():
            # Inline styles, not a class on #hosts: a class there restyles every widget below it
            # (~100 with 64 panels), this touches two containers per host and one widget per panel.
            for sec in self.sections.values():
                sec.set_compact(on, self.grid_columns())

    def fit(self, width: int, height: int) -> None:
        """Small terminals (80x24): compact panels so several GPUs fit; back to full panels when it grows
        (until the operator presses ``c``); on a narrow one the panes go under the panels."""
        self.set_stacked(width < STACK_BELOW)
        if self.user_compact:
            return
        small = width < SMALL[0] or height < SMALL[1]
        if small != self.compact:
            self.set_compact(small)

    def grid_columns(self, width: int | None = None) -> int:
        """GPU panels per row in compact mode for a hosts pane ``width`` cells wide."""
        if width is None:
            width = self.query_one("#hosts").size.width or self.app.size.width
        return max(1, min(8, (width - 1) // COMPACT_CELL))

    def set_grid(self) -> None:
        if not self.compact:
            return
        n = self.grid_columns()
        for sec in self.sections.values():
            sec.set_compact(True, n)

    def set_stacked(self, on: bool) -> None:
        """The steps, log and audit panes under the GPU panels, each half the height and the full width (``on``), or
        beside them. Inline styles on the three containers, as :meth:`set_compact` does (a class would restyle every
        widget below it)."""
        if on == self.stacked:
            return
        self.stacked = on
        if self.is_mounted:  # else on_mount does it (the terminal's size comes before the panes exist)
            self._stack(on)

    def _stack(self, on: bool) -> None:
        body, hosts, side = (self.query_one(f"#{i}") for i in ("body", "hosts", "side"))
        if on:
            body.styles.layout = "vertical"
            for box in (hosts, side):
                box.styles.width, box.styles.height, box.styles.min_width = "1fr", "1fr", 0
            side.styles.border_left = ("none", "transparent")
        else:
            body.styles.clear_rule("layout")
            for box in (hosts, side):
                for rule in ("width", "height", "min_width"):
                    box.styles.clear_rule(rule)
            side.styles.clear_rule("border_left")
        self.set_grid()

    # ------------------------------------------------------------------ the panes
    def action_filter_log(self) -> None:
        self.log_pane.open_filter()

    def action_wrap_log(self) -> None:
        self.log_pane.toggle_wrap()

    def action_follow_log(self) -> None:
        self.log_pane.follow()

    def action_audit(self) -> None:
        self.audit_pane.toggle_class("-shown")

    # ------------------------------------------------------------------ read-only
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        top = self.app.screen
        if top is not self and not isinstance(top, CommandPalette):
            return False  # under another screen (a dialog, a form): hidden from the footer it shows through
        if action in PANEL_ACTIONS and isinstance(self.focused, DeploymentRowView):
            return False  # a deployment row is focused: no key acts on a GPU panel the operator is not on
        return allowed(action, self.console.read_only)

    def refuse(self, action: str) -> None:
        """A destructive key whose action is disabled (read-only mode, or a GPU panel's key on a deployment row):
        say why it does nothing."""
        if self.console.read_only:
            self.console.say(f"read-only: {DESTRUCTIVE[action]} disabled", severity="warning")
        elif action in PANEL_ACTIONS and isinstance(self.focused, DeploymentRowView):
            self.console.say(f"{DESTRUCTIVE[action]} acts on a GPU panel: tab or ↓ to one", severity="warning")

    def key_l(self) -> None:
        self.refuse("launch")

    def key_k(self) -> None:
        self.refuse("kill")

    def key_r(self) -> None:
        self.refuse("roll_deployment" if isinstance(self.focused, DeploymentRowView) else "relaunch")

    def key_e(self) -> None:
        self.refuse("edit")

    def key_x(self) -> None:
        self.refuse("abort")

    # ------------------------------------------------------------------ what the keys start
    def action_launch(self) -> None:
        self.console.ops.launch()

    def action_kill(self) -> None:
        self.console.ops.kill()

    def action_relaunch(self) -> None:
        self.console.ops.relaunch()

    def action_roll_deployment(self) -> None:
        """``r`` on a deployment row: its rolling relaunch (``console/ui/screens/roll.py``: flags, then confirm)."""
        from console.ui.screens.roll import roll_deployment

        f = self.focused
        if isinstance(f, DeploymentRowView) and f.row is not None:
            roll_deployment(self.console, f.row)

    def action_edit(self) -> None:
        self.console.ops.edit()

    def action_abort(self) -> None:
        self.console.ops.abort()

    def action_probe_lines(self) -> None:
        self.log_pane.toggle_probes()

    def action_sessions(self) -> None:
        self.console.workflow.sessions()

    def action_full_log(self) -> None:
        self.console.workflow.full_log()

    def action_orphans(self) -> None:
        self.console.workflow.orphans()

    def action_events(self) -> None:
        self.console.workflow.events()

    def action_advice(self) -> None:
        self.console.advice_actions.show()

    def action_report(self) -> None:
        self.console.advice_actions.report()
