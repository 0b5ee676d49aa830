"""The confirmation steps of the action in progress: ✓ / ✗ / spinner, elapsed time, evidence.

Operations on different GPUs run at once: the pane shows the one begun last, and lists the others still
running (each with the step it is at) under its title.

The pane has a maximum height and scrolls (Textual's own scrolling: the wheel, or the arrow and page
keys once it has focus). The title and the outcome stay at its top; below them one line per step.
It keeps the step that matters in view: the last one, or the failing or running one when steps come
after it; scrolling back shows the earlier ones, and once the operator has scrolled away the pane
stays where it was put until the next operation begins.
"""

from __future__ import annotations

from typing import Callable

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from console.core.text import STEP_MARKS
from console.model import OperationResult, Step, StepState
from console.ui.format import clean, short

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
"""The running step's mark, animated (:data:`~console.core.text.STEP_MARKS` holds the other states' marks)."""
STYLE: dict[StepState, str] = {"ok": "$text-success", "failed": "$text-error", "pending": "$text-muted",
                               "skipped": "$text-muted", "warning": "$text-warning", "running": "$text-warning"}


class StepsView(VerticalScroll):
    """Steps of one operation; hidden until the first operation starts."""

    def __init__(self, clock: Callable[[], float], **kw) -> None:
        super().__init__(classes="steps", **kw)
        self.clock = clock
        self.title = ""
        self.steps: list[Step] = []
        self.result: OperationResult | None = None
        self.others: list[str] = []
        """The other operations still running, one line each (``set_others``)."""
        self.frame = 0
        self.head = Static("", classes="steps-head")
        """The title and the outcome (docked: they do not scroll away)."""
        self.rows: list[Static] = []
        """One line per step, in order."""
        self._auto_y: float | None = None
        """Where the pane last scrolled itself; the operator has scrolled away when it is elsewhere."""

    def compose(self) -> ComposeResult:
        yield self.head

    def on_mount(self) -> None:
        self._draw()

    def begin(self, title: str) -> None:
        self.title, self.steps, self.result = title, [], None
        self._auto_y = None  # a new operation: its steps are followed again
        self.add_class("-active")
        self._draw()

    def set_others(self, lines: list[str]) -> None:
        """The other operations still running (one line each, listed under the title); redrawn when they change."""
        if lines != self.others:
            self.others = list(lines)
            if self.is_mounted:
                self.head.update(self._head())

    def set_steps(self, steps: list[Step]) -> None:
        self.steps = list(steps)
        self._draw()

    def finish(self, result: OperationResult) -> None:
        self.result = result
        if result.steps:
            self.steps = list(result.steps)
        self._draw()

    def tick(self) -> None:
        """Advance the spinner (not called when animations are off, so tests see one frame)."""
        running = [i for i, s in enumerate(self.steps) if s.state == "running" and i < len(self.rows)]
        if self.result is None and running:
            self.frame = (self.frame + 1) % len(SPINNER)
            width = max(len(s.name) for s in self.steps)
            for i in running:  # only the running rows change (their spinner and elapsed time)
                self.rows[i].update(self._line(self.steps[i], width))

    @property
    def text(self) -> str:
        """What the pane says, all of it (scrolled out of view or not), as plain text."""
        width = max((len(s.name) for s in self.steps), default=0)
        return "\n".join([self._head().plain, *(self._line(s, width).plain for s in self.steps)])

    def focus_index(self) -> int | None:
        """The step that matters: the failing one, else the running one, else the last (None: no steps)."""
        if not self.steps:
            return None
        return next((i for i, s in enumerate(self.steps) if s.state in ("failed", "running")), len(self.steps) - 1)

    def _elapsed(self, s: Step) -> str:
        if s.elapsed_s is not None:
            return f"{s.elapsed_s:.1f} s"
        if s.state == "running" and s.started_at is not None:
            return f"{max(0.0, self.clock() - s.started_at):.1f} s"
        return ""

    def _head(self) -> Content:
        parts = [Content.from_markup("[b]$t[/b]", t=self.title)]
        parts += [Content.from_markup("[$text-muted]also running: $t[/]", t=short(clean(x), 160)) for x in self.others]
        r = self.result
        if r is not None:
            if r.aborted:
                parts.append(Content.from_markup("[$text-warning b]$t[/]", t=f"{r.op} ABORTED: {r.aborted}"
                                                 + (f" ({r.state.upper()})" if r.state else "")))
            elif r.ok:
                parts.append(Content.from_markup("[$text-success b]$t[/]",
                                                 t=f"{r.op} ok" + (f": {r.state.upper()}" if r.state else "")))
            else:
                what = f"{r.op} REFUSED, nothing started" if r.refused else f"{r.op} FAILED" + (f": {r.cause}" if r.cause else "")
                parts.append(Content.from_markup("[$text-error b]$t[/]", t=what))
                for extra in (r.line, r.error, r.hint and f"hint: {r.hint}", *[f"left: {x}" for x in r.left]):
                    if extra:
                        parts.append(Content(short(clean(extra), 300)))
        return Content("\n").join(parts)

    def _line(self, s: Step, width: int) -> Content:
        icon = SPINNER[self.frame] if s.state == "running" else STEP_MARKS[s.state]
        style = STYLE[s.state]
        return Content.from_markup(
            f"[{style}]$icon[/] $name $el  [$text-muted]$ev[/]",
            icon=icon, name=s.name.ljust(width), el=self._elapsed(s).rjust(7),
            ev=short(clean(s.evidence or ""), 160),
        )

    def _draw_rows(self) -> None:
        """One row per step: extra rows removed, missing ones mounted, every row's text set."""
        for row in self.rows[len(self.steps):]:
            row.remove()
        del self.rows[len(self.steps):]
        width = max((len(s.name) for s in self.steps), default=0)
        for row, s in zip(self.rows, self.steps):
            row.update(self._line(s, width))
        new = [Static(self._line(s, width), classes="steps-row") for s in self.steps[len(self.rows):]]
        if new:
            self.rows.extend(new)
            self.mount(*new)

    def _draw(self) -> None:
        if not self.is_mounted:
            return  # drawn when mounted
        self.head.update(self._head())
        self._draw_rows()
        self.call_after_refresh(self._follow)

    def _follow(self) -> None:
        """Keep the last step, and the step that matters, in view, unless the operator has scrolled away."""
        if self._auto_y is not None and self.scroll_y != self._auto_y and self.scroll_y < self.max_scroll_y:
            return
        i = self.focus_index()
        self.scroll_end(animate=False, immediate=True)
        if i is not None and i < len(self.rows) and self.rows[i].is_mounted:
            self.scroll_to_widget(self.rows[i], animate=False, immediate=True)
        self._auto_y = self.scroll_y
