"""A session-state badge; the rule that decides what it says is ``console.core.current.badge_for``.

A badge is green only when verified now: a READY session on a host whose sample is stale
reads STALE, and every session on an unreachable host reads UNREACHABLE.
"""

from __future__ import annotations

from textual.widgets import Static

from console.core.current import BADGE_KINDS, DOWN, badge_for, staleness

# The rule is pure and shared with the CLI's `status` (console/core/current.py); these names stay importable here.
__all__ = ["BADGE_KINDS", "DOWN", "Badge", "badge_for", "staleness"]


class Badge(Static):
    """A coloured label; its kind is a CSS class ``badge-<kind>``."""

    def __init__(self, label: str = "IDLE", kind: str = "idle", **kw) -> None:
        super().__init__(label, markup=False, classes=f"badge badge-{kind}", **kw)
        self._state = (label, kind)

    def set(self, label: str, kind: str) -> None:
        if (label, kind) == self._state:
            return
        self.remove_class(f"badge-{self._state[1]}")
        self.add_class(f"badge-{kind}")
        self._state = (label, kind)
        self.update(label)

    @property
    def label(self) -> str:
        return self._state[0]
