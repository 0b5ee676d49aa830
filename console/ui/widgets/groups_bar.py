"""Multi-node groups (issue 30), shown once above the host sections: a group spans several hosts' sections, so its
state (the worst member's) and its members by rank, host and state are one line here, whatever section a member's
GPU panel sits in. Hidden while no group is live. The lines come from ``console.core.group.group_lines``."""

from __future__ import annotations

from typing import ClassVar

from textual.widgets import Static

from console.core.group import group_lines
from console.model import HostView


class GroupsBar(Static):
    """One line per live group over every host's sessions (see the module docstring)."""

    DEFAULT_CSS: ClassVar[str] = """
    GroupsBar { height: auto; padding: 0 1; color: $text; background: $boost; display: none; }
    GroupsBar.-shown { display: block; }
    """

    def __init__(self, **kw) -> None:
        super().__init__("", markup=False, **kw)
        self.text = ""

    def show(self, views: list[HostView]) -> None:
        """Redraw from the views of every host (only when the text changed)."""
        text = "\n".join(group_lines(s for v in views for s in v.sessions))
        if text != self.text:
            self.text = text
            self.update(text)
            self.set_class(bool(text), "-shown")
