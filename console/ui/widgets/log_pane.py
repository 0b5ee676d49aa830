"""The selected session's own log: banner, ring buffer, highlighting, filter, wrap, follow.

Lines are sanitised (no escapes or control characters) and cut to 2,000 characters before
they are stored; the buffer keeps the last 10,000. Writes are batched by the caller.

Following is a mode, not a geometry test: it is on until the operator scrolls up and back on
with ``end`` or by scrolling to the end, so a redraw (wrap, filter, resize) never drops it.
Long lines are cut at the pane's edge (``w`` wraps them): no horizontal scrollbar, whose
one-row thumb drew a stray ``▉`` under the log.

The console's own probes (uvicorn's access lines of ``GET /metrics`` and ``/health``,
:mod:`console.core.probes`) are folded by default: left out of the view, their number said on
one muted line under the log; ``h`` (:meth:`LogPane.toggle_probes`) shows them, and folds them again.
A server launched by this console on a host whose SGLang has ``--uvicorn-access-log-exclude-prefixes``
does not write them at all; the fold is for the others (started by hand, older servers).
"""

from __future__ import annotations

import re
from collections import deque

from rich.highlighter import Highlighter
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Log, Static

from console.core.probes import PROBE_PREFIXES, is_probe_line
from console.ui.format import clean

RING = 10_000
ERROR = re.compile(r"Traceback|Error|error:|Not enough memory|out of memory|FAILED|Exception")
READY = re.compile(r"The server is fired up and ready to roll|Application startup complete")
NO_SESSION = "no session selected — focus a GPU panel (enter / tab)"
"""The banner before a panel is selected."""


class _LineHighlighter(Highlighter):
    def __init__(self, log: SessionLog) -> None:
        self.log = log

    def highlight(self, text: Text) -> None:
        plain = text.plain
        if READY.search(plain):
            text.stylize(self.log.get_component_rich_style("session-log--ready"))
        elif ERROR.search(plain):
            text.stylize(self.log.get_component_rich_style("session-log--error"))


class SessionLog(Log):
    """A ``Log`` that marks error lines and the ready line."""

    COMPONENT_CLASSES = {"session-log--error", "session-log--ready"}

    def __init__(self, **kw) -> None:
        super().__init__(highlight=True, max_lines=RING, **kw)
        self.highlighter = _LineHighlighter(self)


class LogPane(Vertical):
    """Shows exactly one session's log at a time."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.key: tuple[str, str] | None = None
        self.lines: deque[str] = deque(maxlen=RING)
        self.pattern = ""
        self.wrap = False
        self.unseen = 0
        self.following = True
        """The view sticks to the end as lines arrive (off once the operator scrolls up)."""
        self.waiting = False
        """A session is shown whose log has no line yet."""
        self.banner_text: str | None = None
        """What the banner shows (it is redrawn only when this changes)."""
        self._redrawing = False
        self._filter_from: tuple[str, float, bool] | None = None
        """(pattern, scroll position, following) when the filter box was opened: esc goes back to it."""
        self.probes_shown = False
        """The console's probe lines are shown (``h``); folded out of the view by default."""
        self.probe_lines = 0
        """How many of the kept lines are probe lines (what the fold leaves out)."""

    def compose(self) -> ComposeResult:
        yield Static(NO_SESSION, classes="banner", markup=False)
        yield Input(placeholder="filter (enter to apply, esc to close)", classes="filter")
        yield SessionLog(classes="log")
        yield Static("", classes="new-lines", markup=False)
        yield Static("", classes="probes", markup=False)

    @property
    def banner_shown(self) -> str:
        """What the banner says now."""
        return NO_SESSION if self.banner_text is None else self.banner_text

    @property
    def log_widget(self) -> SessionLog:
        return self.query_one(SessionLog)

    def on_mount(self) -> None:
        self.log_widget.styles.scrollbar_size_horizontal = 0
        self.watch(self.log_widget, "scroll_y", self._scrolled, init=False)
        if self.app.animation_level == "none":  # reduced motion: no blinking cursors either
            for box in self.query(Input):
                box.cursor_blink = False

    # ---- session switching
    def start(self, host: str, session_id: str, banner: str) -> None:
        """Forget the previous session's lines and show ``banner`` for the new one (its log may be
        empty yet: "waiting for output" until its first line)."""
        self.key = (host, session_id)
        self.show_banner(banner)
        self._reset(waiting=True)

    def stop(self, message: str) -> None:
        """Show no session: ``message`` says why."""
        self.key = None
        self.show_banner(message)
        self._reset(waiting=False)

    def _reset(self, waiting: bool) -> None:
        self.lines.clear()
        self.probe_lines = 0
        self._redrawing = True
        try:
            self.log_widget.clear()
        finally:
            self._redrawing = False
        self.unseen = 0
        self.following = True
        self.waiting = waiting
        self._indicator()
        self._probes_line()

    def show_banner(self, text: str) -> None:
        """Redraw the banner when it changes; a layout pass only when its number of lines does
        (it is re-shown on every view, once a second)."""
        box = self.query_one(".banner", Static)
        old = self.banner_text
        if text == old:
            return
        self.banner_text = text
        box.update(text, layout=old is None or old.count("\n") != text.count("\n"))

    # ---- lines
    def add_lines(self, raw: list[str]) -> None:
        """Append a batch with one write; follows the end unless the operator scrolled up."""
        new = [clean(x) for x in raw]
        self._count_probes(new)
        self.lines.extend(new)
        if new and self.waiting:
            self.waiting = False
            self._indicator()
        shown = self._view(new)
        if not shown:
            return
        log = self.log_widget
        log.write_lines(shown, scroll_end=False)
        if self.following:
            self._to_end()
        else:
            self.unseen += len(shown)
            self._indicator()

    def _count_probes(self, new: list[str]) -> None:
        """Keep :attr:`probe_lines` right as ``new`` joins the ring (the oldest lines it pushes out leave)."""
        over = len(self.lines) + len(new) - RING
        dropped = sum(1 for i in range(min(max(0, over), len(self.lines))) if is_probe_line(self.lines[i]))
        kept = new[max(0, len(new) - RING):]
        added = sum(1 for x in kept if is_probe_line(x))
        if dropped or added:
            self.probe_lines += added - dropped
            self._probes_line()

    def _view(self, lines: list[str]) -> list[str]:
        if not self.probes_shown:
            lines = [x for x in lines if not is_probe_line(x)]
        if self.pattern:
            p = self.pattern.lower()
            lines = [x for x in lines if p in x.lower()]
        if not self.wrap:
            return lines
        w = max(20, (self.log_widget.size.width or 100) - 2)
        return [x[i : i + w] for x in lines for i in range(0, max(1, len(x)), w)]

    def redraw(self, keep_y: float | None = None) -> None:
        """Rewrite the lines (filter or wrap changed); stays at the end when following, else at
        ``keep_y`` when given."""
        log = self.log_widget
        self._redrawing = True
        try:
            log.clear()
            log.write_lines(self._view(list(self.lines)), scroll_end=False)
            if self.following:
                self._to_end()
        finally:
            self._redrawing = False
        if not self.following and keep_y is not None:
            self.call_after_refresh(self._restore, keep_y)
        self.unseen = 0
        self._indicator()

    def _to_end(self) -> None:
        """Stick to the end (Log's own auto-scroll only does when the view is exactly at the end)."""
        log = self.log_widget
        if not log.is_vertical_scrollbar_grabbed:
            log.scroll_end(animate=False, immediate=True, x_axis=False)

    def _restore(self, y: float) -> None:
        self._redrawing = True
        try:
            self.log_widget.scroll_to(y=y, animate=False, immediate=True)
        finally:
            self._redrawing = False

    # ---- filter / wrap / follow
    def open_filter(self) -> None:
        box = self.query_one(".filter", Input)
        if self._filter_from is None:
            self._filter_from = (self.pattern, self.log_widget.scroll_y, self.following)
        box.add_class("-open")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: the filter is applied; the box stays open only while it holds a filter (cleared: it closes)."""
        event.stop()
        self._filter_from = None
        self.set_filter(event.value)
        self.log_widget.focus()
        self.query_one(".filter", Input).set_class(bool(self.pattern), "-open")

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        """The filter box left empty (tab, a click elsewhere) closes: an open box means a filter is on."""
        box = self.query_one(".filter", Input)
        if event.widget is box and not self.pattern:
            self._filter_from = None
            box.remove_class("-open")

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.set_filter(event.value)

    def key_escape(self) -> None:
        """Close the filter box: the filter and the scroll position go back to what they were."""
        box = self.query_one(".filter", Input)
        if not box.has_focus:
            return
        pattern, y, following = self._filter_from or (self.pattern, self.log_widget.scroll_y, self.following)
        self._filter_from = None
        with box.prevent(Input.Changed):
            box.value = pattern
        box.remove_class("-open")
        self.log_widget.focus()
        if pattern != self.pattern:
            self.pattern = pattern
            self.following = following
            self.redraw(keep_y=y)
        box.set_class(bool(pattern), "-open")

    def set_filter(self, pattern: str) -> None:
        pattern = clean(pattern, 200)
        if pattern != self.pattern:
            self.pattern = pattern
            self.query_one(".filter", Input).set_class(bool(pattern) or self.query_one(".filter").has_focus, "-open")
            self.redraw()

    def toggle_probes(self) -> None:
        """Show the console's probe lines, or fold them out of the view again (``h``)."""
        self.probes_shown = not self.probes_shown
        self.redraw(keep_y=self.log_widget.scroll_y)
        self._probes_line()

    def _probes_line(self) -> None:
        """The muted line under the log that says how many probe lines are folded (hidden when none are)."""
        box = self.query_one(".probes", Static)
        n = 0 if self.probes_shown else self.probe_lines
        paths = ", ".join(f"GET {p}" for p in PROBE_PREFIXES)
        text = f"{n:,} probe line{'s' if n != 1 else ''} folded ({paths}): h shows them" if n else ""
        box.update(text)
        box.set_class(bool(text), "-shown")

    def toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        self.redraw(keep_y=self.log_widget.scroll_y)

    def follow(self) -> None:
        self.following = True
        self._to_end()
        self.unseen = 0
        self._indicator()

    def _scrolled(self, _y: float) -> None:
        if self._redrawing:
            return
        log = self.log_widget
        at_end = log.scroll_y >= log.max_scroll_y - 1
        if at_end != self.following:
            self.following = at_end
            if at_end:
                self.unseen = 0
            self._indicator()

    def _indicator(self) -> None:
        ind = self.query_one(".new-lines", Static)
        text = (f"↓ {self.unseen} new lines (end to follow)" if self.unseen
                else "waiting for output…" if self.waiting and self.key is not None else "")
        ind.update(text)
        ind.set_class(bool(text), "-shown")

    def on_resize(self) -> None:
        if self.wrap:
            self.redraw()
