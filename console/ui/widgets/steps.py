"""The confirmation steps of the action in progress: ✓ / ✗ / spinner, elapsed time, evidence.

The pane has a maximum height; when the steps do not fit, the first ones give way to a
"↑ N more step(s) above" line so that the step that matters stays in view: the failing one,
the running one, or the last.
"""

from __future__ import annotations

from typing import Callable

from textual.content import Content
from textual.widget import Widget
from textual.widgets import Static

from console.model import OperationResult, Step
from console.ui.format import clean, short

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_ICON = {"ok": ("✓", "$text-success"), "failed": ("✗", "$text-error"), "pending": ("·", "$text-muted"),
         "skipped": ("–", "$text-muted"), "warning": ("⚠", "$text-warning")}


class StepsView(Static):
    """Steps of one operation; hidden until the first operation starts."""

    def __init__(self, clock: Callable[[], float], **kw) -> None:
        super().__init__("", classes="steps", **kw)
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

    def _room(self) -> int:
        """Lines the pane can show: its maximum height (a share of the side column) in cells."""
        parent = self.parent
        mh = self.styles.max_height
        if not isinstance(parent, Widget) or not parent.size.height or mh is None:
            return 0
        return max(4, int(mh.resolve(parent.size, self.app.size)) - 1)  # less the bottom border

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
        room = self._room() - len(parts)
        shown = self.steps
        if 0 < room < len(shown):  # does not fit: keep the step that matters (failing, running, else the last)
            focus = next((i for i, s in enumerate(shown) if s.state in ("failed", "running")), len(shown) - 1)
            end = max(room - 1, min(len(shown), focus + 1))
            start = end - (room - 1)
            parts.append(Content.styled(f"↑ {start} more step(s) above", "$text-muted"))
            shown = shown[start:end]
        for s in shown:
            icon, style = _ICON.get(s.state, (SPINNER[self.frame], "$text-warning"))
            parts.append(Content.from_markup(
                f"[{style}]$icon[/] $name $el  [$text-muted]$ev[/]",
                icon=icon, name=s.name.ljust(width), el=self._elapsed(s).rjust(7),
                ev=short(clean(s.evidence or ""), 160),
            ))
        self.update(Content("\n").join(parts))
