"""The full-screen log (``z``): the log pane's session at the full width and height of the terminal.

Its banner names the session and wraps its whole command line (up to half the screen's height). Inside it ``/`` searches (matches highlighted, ``n``/``N`` next/previous), ``d`` jumps to the
decisive line (the failure's line, else the last error), ``w`` wraps (and keeps following),
``end`` follows again, ``r`` re-reads a hand-started server's output. It shows what the log pane
follows — the current session of the selected GPU, switching with it (a new launch appears at
once) — and follows by default. For a hand-started (foreign) server it shows that server's own
stdout file when ``/proc/<pid>/fd/1`` is a readable regular file on the host.

Lines come from the app: what the log pane holds when the screen opens (plus lines still queued
for it), then each new batch through ``app.log_listeners``. Nothing here talks to a host except
through the backend's ``foreign_output``.
"""

from __future__ import annotations

import re
from collections import deque

from rich.highlighter import Highlighter
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, Log, Static

from console.core.text import steps_line
from console.model import SessionView
from console.ui.format import clean
from console.ui.log_follow import banner
from console.ui.protocols import Console
from console.ui.widgets.footer import QuietFooter
from console.ui.widgets.key_help import help_keys, quit_key
from console.ui.widgets.log_pane import ERROR, READY

RING = 10_000


class _Highlighter(Highlighter):
    """Errors and the ready line as in the log pane, and every search match."""

    def __init__(self, screen: LogScreen) -> None:
        self.screen = screen

    def highlight(self, text: Text) -> None:
        log = self.screen.log_widget
        plain = text.plain
        if READY.search(plain):
            text.stylize(log.get_component_rich_style("full-log--ready"))
        elif ERROR.search(plain):
            text.stylize(log.get_component_rich_style("full-log--error"))
        term = self.screen.term
        if term:
            style = log.get_component_rich_style("full-log--match") + Style(reverse=True)
            for m in re.finditer(re.escape(term), plain, re.IGNORECASE):
                text.stylize(style, m.start(), m.end())


class FullLog(Log):
    """The full-screen log's text area (component classes give the theme's colours)."""

    COMPONENT_CLASSES = {"full-log--error", "full-log--ready", "full-log--match"}
    DEFAULT_CSS = """
    FullLog { height: 1fr; background: $surface; }
    FullLog > .full-log--error { color: $text-error; }
    FullLog > .full-log--ready { color: $text-success; }
    FullLog > .full-log--match { color: $text-warning; text-style: bold; }
    """


class LogScreen(Screen):
    """The log pane's session, full screen (see the module docstring)."""

    DEFAULT_CSS = """
    LogScreen { layout: vertical; }
    LogScreen .banner { height: auto; max-height: 50%; padding: 0 1; background: $panel; color: $text; }
    LogScreen .status { height: 1; padding: 0 1; background: $panel; color: $text-muted; }
    LogScreen Input.search { display: none; height: 3; }
    LogScreen Input.search.-open { display: block; }
    """
    BINDINGS = [
        Binding("z", "close", "Back", tooltip="back to the GPU panels (the log pane); esc too"),
        Binding("slash", "search", "Search", tooltip="search the log (n / N: next / previous match)"),
        Binding("n", "next_match(1)", "Next", tooltip="the next match of the search"),
        Binding("N", "next_match(-1)", "Prev", tooltip="the previous match of the search"),
        Binding("d", "decisive", "Decisive line", tooltip="jump to the failure's decisive line (or the last error)"),
        Binding("w", "wrap", "Wrap", tooltip="wrap long lines (following continues)"),
        Binding("end", "follow", "Follow", tooltip="jump to the end and follow", priority=True),
        Binding("r", "reload", "Reload", show=False, tooltip="re-read a hand-started server's output"),
        *help_keys(),
        quit_key(),
    ]

    def __init__(self, console: Console, pinned: SessionView | None = None) -> None:
        super().__init__()
        self.console = console
        self.pinned = pinned
        """A session chosen in the sessions table that is not the log pane's: followed by this screen itself."""
        self.own = False
        """This screen follows ``key`` through the backend (pinned mode)."""
        self.key: tuple[str, str] | None = None
        self.lines: deque[str] = deque(maxlen=RING)
        self.rows: list[str] = []
        """What is drawn: the lines, wrapped when wrap is on."""
        self.term = ""
        self.matches: list[int] = []
        self.match_i = -1
        self.wrap = False
        self.following = True
        self.synced = False
        self.foreign_pid: int | None = None
        self._redrawing = False
        self._pending: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static("", classes="banner", markup=False)
        yield FullLog(highlight=True, max_lines=RING * 4)
        yield Input(placeholder="search (enter: find, esc: close; n / N: next / previous)", classes="search")
        yield Static("", classes="status", markup=False)
        yield QuietFooter()

    @property
    def log_widget(self) -> FullLog:
        return self.query_one(FullLog)

    def on_mount(self) -> None:
        log = self.log_widget
        log.highlighter = _Highlighter(self)
        log.styles.scrollbar_size_horizontal = 0
        self.watch(log, "scroll_y", self._scrolled, init=False)
        self.console.log_listeners.append(self._on_log)
        p = self.pinned
        if p is not None and p.session_id and (p.host, p.session_id) != self.console.log_follower.key:
            self.own, self.key = True, (p.host, p.session_id)
            self._show_banner(banner(p, whole=True) + self._steps_text(p.session_id))
            self.run_worker(self._follow_own(), group="full-log", exit_on_error=False)
        else:
            self.sync()
        self.set_interval(0.1, self.tick)
        log.focus()

    def on_unmount(self) -> None:
        if self._on_log in self.console.log_listeners:
            self.console.log_listeners.remove(self._on_log)
        if self.own and self.key is not None and self.key != self.console.log_follower.key:
            host, sid = self.key
            self.console.run_worker(self.console.backend.unfollow_log(host, sid), group="full-log-close",
                                 exit_on_error=False)

    async def _follow_own(self) -> None:
        assert self.key is not None
        try:
            tail = await self.console.backend.follow_log(self.key[0], self.key[1], RING)
        except Exception as e:  # the host said why: the screen says it
            tail = [f"log of session {self.key[1]} not readable: {clean(str(e), 300)}"]
        self._set_lines([clean(x) for x in tail])
        self.synced = True

    def _steps_text(self, sid: str) -> str:
        result = next((r for r in reversed(self.console.ops.results) if r.session_id == sid), None)
        if result is None or not result.steps:
            return ""
        return "\nsteps: " + steps_line(result.steps)

    # ---- what is shown
    def selected_session(self) -> SessionView | None:
        p = self.console.main.selected
        return p.session if p is not None and p.is_attached else None

    def sync(self) -> None:
        """Take over what the log pane shows (its lines and those still queued for it)."""
        follower = self.console.log_follower
        self.key = follower.key
        pane = self.console.main.log_pane
        s = self.selected_session()
        # the pane's banner, with the whole command line (the pane shows its first 400 characters; here it wraps)
        text = banner(s, whole=True) if s is not None and self.key == (s.host, s.session_id) else pane.banner_shown
        if self.key is None:
            if s is not None and s.session_id is None and s.launcher_pid:
                self.foreign_pid = s.launcher_pid
                self._show_banner(f"foreign server pid {s.launcher_pid} · {s.host} · {s.state.upper()}\n"
                                  f"$ {clean(' '.join(s.argv))}")
                self.action_reload()
                self.synced = True
                return
            self.foreign_pid = None
            self._show_banner(text)
            self._set_lines([])
            self.synced = True
            return
        self.foreign_pid = None
        if follower.busy:
            self.synced = False  # its tail is on its way: take it over once shown
            self._show_banner(text)
            return
        queued = [x for host, sid, lines in follower.queue if (host, sid) == self.key for x in lines]
        self._show_banner(text + self._steps_text(self.key[1]))
        self._set_lines([*pane.lines, *[clean(x) for x in queued]])
        self.synced = True

    def _show_banner(self, text: str) -> None:
        self.query_one(".banner", Static).update(text)

    def tick(self) -> None:
        follower = self.console.log_follower
        if not self.own and follower.key != self.key or (not self.synced and not follower.busy):
            if follower.key != self.key or self.foreign_pid is None:
                self.sync()
        if self._pending:
            new, self._pending = self._pending, []
            self._append(new)
        self._status()

    def _on_log(self, host: str, session_id: str, lines: list[str]) -> None:
        if self.synced and (host, session_id) == self.key:
            self._pending.extend(clean(x) for x in lines)

    # ---- drawing
    def _view(self, lines: list[str]) -> list[str]:
        if not self.wrap:
            return lines
        w = max(20, (self.log_widget.size.width or 100) - 2)
        return [x[i: i + w] for x in lines for i in range(0, max(1, len(x)), w)]

    def _set_lines(self, lines: list[str]) -> None:
        self.lines.clear()
        self.lines.extend(lines)
        self.redraw()

    def redraw(self) -> None:
        log = self.log_widget
        self.rows = self._view(list(self.lines))
        self._redrawing = True
        try:
            log.clear()
            log.write_lines(self.rows, scroll_end=self.following)
        finally:
            self._redrawing = False
        self._find()

    def _append(self, new: list[str]) -> None:
        self.lines.extend(new)
        rows = self._view(new)
        start = len(self.rows)
        self.rows.extend(rows)
        self.log_widget.write_lines(rows, scroll_end=self.following)
        if self.term:
            t = self.term.lower()
            self.matches += [start + i for i, r in enumerate(rows) if t in r.lower()]
        if len(self.rows) > RING * 4:  # the widget dropped its oldest rows: draw again from the ring
            self.redraw()

    def _status(self) -> None:
        parts = []
        if self.term:
            parts.append(f"/{self.term}: " + (f"match {self.match_i + 1} of {len(self.matches)}" if self.matches
                                               and self.match_i >= 0 else f"{len(self.matches)} matches"))
        parts.append("following" if self.following else "scrolled (end: follow)")
        if self.wrap:
            parts.append("wrap")
        parts.append(f"{len(self.lines)} lines")
        text = " · ".join(parts)
        box = self.query_one(".status", Static)
        if getattr(box, "_text", None) != text:
            box._text = text  # type: ignore[attr-defined]
            box.update(text)

    # ---- scrolling
    def _scrolled(self, _y: float) -> None:
        if self._redrawing:
            return
        log = self.log_widget
        self.following = log.scroll_y >= log.max_scroll_y - 1

    def _goto(self, row: int) -> None:
        self.following = False
        self._redrawing = True
        try:
            self.log_widget.scroll_to(y=max(0, row - 3), animate=False, immediate=True)
        finally:
            self._redrawing = False

    # ---- search
    def _find(self) -> None:
        t = self.term.lower()
        self.matches = [i for i, r in enumerate(self.rows) if t in r.lower()] if t else []
        self.match_i = -1

    def action_search(self) -> None:
        box = self.query_one(Input)
        box.add_class("-open")
        box.value = self.term
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.set_term(event.value)
        self.query_one(Input).remove_class("-open")
        self.log_widget.focus()

    def set_term(self, term: str) -> None:
        """Search for ``term`` (case-insensitive): highlight every match, go to the first from the top
        of the view (the last one when following)."""
        self.term = clean(term, 200)
        log = self.log_widget
        log._render_line_cache.clear()  # the highlighter's output depends on the term
        self._find()
        log.refresh()
        if self.matches:
            top = int(log.scroll_y)
            after = [i for i, r in enumerate(self.matches) if r >= top]
            self.match_i = len(self.matches) - 1 if self.following or not after else after[0]
            self._goto(self.matches[self.match_i])
        self._status()

    def action_next_match(self, step: int) -> None:
        if not self.matches:
            if self.term:
                self.app.notify(f"no match for {self.term!r}", markup=False)
            return
        self.match_i = (self.match_i + step) % len(self.matches)
        self._goto(self.matches[self.match_i])
        self._status()

    def key_escape(self) -> None:
        box = self.query_one(Input)
        if box.has_class("-open"):
            box.remove_class("-open")
            self.log_widget.focus()
        else:
            self.dismiss()

    def action_decisive(self) -> None:
        """The failure's decisive line (as classified) if shown here, else the last error line."""
        s = self.selected_session()
        want = clean(s.line)[:80] if s is not None and s.line and self.key and s.session_id == self.key[1] else None
        row = None
        if want:
            row = next((i for i in range(len(self.rows) - 1, -1, -1) if want[:60] in self.rows[i]), None)
        if row is None:
            row = next((i for i in range(len(self.rows) - 1, -1, -1) if ERROR.search(self.rows[i])), None)
        if row is None:
            self.app.notify("no decisive line or error in this log", markup=False)
            return
        self._goto(row)

    def action_wrap(self) -> None:
        self.wrap = not self.wrap
        self.redraw()

    def action_follow(self) -> None:
        self.following = True
        self.log_widget.scroll_end(animate=False)

    def action_reload(self) -> None:
        if self.foreign_pid is None:
            return
        s = self.selected_session()
        if s is None or s.launcher_pid is None:
            self._set_lines([f"pid {self.foreign_pid} was not started by mtpconsole and is no longer listed"])
            return
        self.run_worker(self._read_foreign(s, s.launcher_pid), group="foreign-log", exclusive=True,
                        exit_on_error=False)

    async def _read_foreign(self, s: SessionView, pid: int) -> None:
        try:
            where, lines = await self.console.backend.foreign_output(s.host, pid, s.launcher_start_ticks)
        except Exception as e:  # the host said why (not a regular file, unreadable, gone)
            where, lines = "", [f"no output of pid {s.launcher_pid}: {clean(str(e), 300)}"]
        self._set_lines([clean(x) for x in lines])
        if where:
            self._show_banner(f"foreign server pid {s.launcher_pid} · {s.host} · output: {clean(where, 200)}\n"
                              f"$ {clean(' '.join(s.argv))}")

    def action_close(self) -> None:
        self.dismiss()

    def on_resize(self) -> None:
        if self.wrap:
            self.redraw()
