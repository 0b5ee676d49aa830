"""The confirmation steps of the action in progress: ✓ / ✗ / spinner, elapsed time, evidence.

The pane has a maximum height; when the steps do not fit it scrolls (its scrollbar says so)
and keeps the step that matters in view: the running one, the failing one, or the last.
"""

from __future__ import annotations

from typing import Callable

from textual.content import Content
from textual.widgets import Static

from console.model import OperationResult, Step
from console.ui.format import clean, short

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_ICON = {"ok": ("✓", "$text-success"), "failed": ("✗", "$text-error"), "pending": ("·", "$text-muted"),
         "skipped": ("–", "$text-muted")}


class StepsView(Static):
    """Steps of one operation; hidden until the first operation starts."""

    def __init__(self, clock: Callable[[], float], **kw) -> None:
        super().__init__("", classes="steps", **kw)
        self.styles.overflow_y = "auto"
        self.clock = clock
        self.title = ""
        self.steps: list[Step] = []
        self.result: OperationResult | None = None
        self.frame = 0

    def begin(self, title: str) -> None:
        self.title, self.steps, self.result = title, [], None
        self.add_class("-active")
        self._draw()

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
        if self.result is None and any(s.state == "running" for s in self.steps):
            self.frame = (self.frame + 1) % len(SPINNER)
            self._draw()

    def _elapsed(self, s: Step) -> str:
        if s.elapsed_s is not None:
            return f"{s.elapsed_s:.1f} s"
        if s.state == "running" and s.started_at is not None:
            return f"{max(0.0, self.clock() - s.started_at):.1f} s"
        return ""

    def _draw(self) -> None:
        parts = [Content.from_markup("[b]$t[/b]", t=self.title)]
        # the outcome first: the pane has a maximum height and long evidence must not push it out
        r = self.result
        if r is not None:
            if r.ok:
                parts.append(Content.from_markup("[$text-success b]$t[/]",
                                                 t=f"{r.op} ok" + (f": {r.state.upper()}" if r.state else "")))
            else:
                what = f"{r.op} FAILED" + (f": {r.cause}" if r.cause else "")
                parts.append(Content.from_markup("[$text-error b]$t[/]", t=what))
                for extra in (r.line, r.error, r.hint and f"hint: {r.hint}", *[f"left: {x}" for x in r.left]):
                    if extra:
                        parts.append(Content(short(clean(extra), 300)))
        width = max((len(s.name) for s in self.steps), default=0)
        for s in self.steps:
            icon, style = _ICON.get(s.state, (SPINNER[self.frame], "$text-warning"))
            parts.append(Content.from_markup(
                f"[{style}]$icon[/] $name $el  [$text-muted]$ev[/]",
                icon=icon, name=s.name.ljust(width), el=self._elapsed(s).rjust(7),
                ev=short(clean(s.evidence or ""), 160),
            ))
        self.update(Content("\n").join(parts))
        focus = next((i for i, s in enumerate(self.steps) if s.state in ("failed", "running")), None)
        if focus is None and self.result is not None:
            focus = len(self.steps) - 1
        if focus is not None:
            line = len(parts) - len(self.steps) + focus
            self.call_after_refresh(self._show_line, line)

    def _show_line(self, line: int) -> None:
        """Scroll so that ``line`` is visible (the bottom of the pane when it is below)."""
        h = self.scrollable_content_region.height
        if h <= 0 or self.max_scroll_y <= 0:
            return
        if not (self.scroll_y <= line < self.scroll_y + h):
            self.scroll_to(y=max(0, line - h + 1), animate=False, immediate=True)
