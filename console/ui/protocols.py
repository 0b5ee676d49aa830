"""What the UI's parts see of each other: small Protocols, defined below every part that uses them.

The app (``console/ui/app.py``) builds its helpers — the view pipeline, the log follower, the operations,
the workflow, the advice keys — and the GPU panels' screen, and hands each of them *itself*, typed as
:class:`Console`. None of them imports the app (it imports them: an import back would be a cycle), and none
calls a private method of it. Each Protocol lists only what its users call; mypy checks that the app, the
main screen and the helpers provide it.
"""

from __future__ import annotations

from collections import deque
from contextlib import AbstractContextManager
from typing import Any, Callable, Coroutine, Protocol

from textual.screen import Screen
from textual.widget import Widget

from console.backend import Backend, OnSteps
from console.model import DeploymentRow, HostView, LaunchRequest, OperationResult
from console.ui.idle_gc import IdleCollector
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.host_section import HostSection
from console.ui.widgets.log_pane import LogPane
from console.ui.widgets.steps import StepsView

LogListener = Callable[[str, str, list[str]], None]
"""Told every batch of log lines: (host, session id, lines)."""


class Panels(Protocol):
    """The GPU panels' screen (``console/ui/main_screen.py``): the host sections, the selected panel and the
    panes beside them."""

    @property
    def selected(self) -> GpuPanel | None:
        """The GPU panel the keys act on (its session is the one the log pane shows)."""

    @property
    def is_current(self) -> bool:
        """This screen is on top (no dialog, form or other screen over it)."""

    @property
    def shown(self) -> bool:
        """It can be seen: on top, or only under screens that let it through (a dialog); not under the fleet
        overview or a table."""

    @property
    def composed(self) -> bool:
        """Its host sections exist (composed, being mounted)."""

    @property
    def live(self) -> bool:
        """Composed and not being torn down at exit (the timers' ticks then touch no widget)."""

    @property
    def user_compact(self) -> bool:
        """The operator toggled compact mode (``c``): the terminal size no longer decides."""

    @property
    def steps(self) -> StepsView:
        """The steps pane: the action in progress."""

    @property
    def log_pane(self) -> LogPane:
        """The log pane: the selected panel's current session."""

    def panels(self) -> list[GpuPanel]:
        """Every GPU panel, in screen order."""

    def show_groups(self, views: list[HostView]) -> None:
        """Show each multi-node group once, over the host sections (issue 30), from every host's view."""

    def show_deployment(self, row: DeploymentRow) -> None:
        """Show a deployment's row above its host's GPU panels (issue 29)."""

    def select(self, panel: GpuPanel) -> None:
        """Make ``panel`` the selected one (the log pane follows its session)."""

    def section(self, host: str) -> HostSection:
        """The section of ``host``, mounted now when the host is new."""

    def in_view(self, widget: Widget) -> bool:
        """Some of ``widget`` is visible now (not scrolled out of its container)."""


class Follower(Protocol):
    """The log pane's follower (``console/ui/log_follow.py``)."""

    @property
    def key(self) -> tuple[str, str] | None:
        """(host, session id) the log pane shows; None when it shows no session."""

    @property
    def busy(self) -> bool:
        """A switch is in progress (the new session's tail is on its way)."""

    @property
    def queue(self) -> deque[tuple[str, str, list[str]]]:
        """Lines arrived and not written yet: (host, session id, lines)."""

    def sync(self, panel: GpuPanel | None) -> None:
        """Show the current session of ``panel``."""


class Actions(Protocol):
    """Launch, kill, relaunch, edit and abort (``console/ui/operations.py``)."""

    @property
    def busy(self) -> bool:
        """An operation runs (on some GPU: each holds only the GPUs it acts on)."""

    @property
    def results(self) -> list[OperationResult]:
        """Every operation's result, oldest first."""

    def launch(self) -> None: ...
    def kill(self) -> None: ...
    def relaunch(self) -> None: ...

    def abort(self) -> None:
        """Stop the launch under way on the focused GPU (its session's group killed, confirmed in a dialog)."""

    def edit(self, flags: list[str] | None = None, why: str | None = None) -> None:
        """Edit and relaunch; ``flags``: start from these server flags (an advice's suggestion)."""

    def guard_groups(self, groups: list[str]) -> None:
        """Multi-node groups seen FAILED with a dead member while others run: the failure policy, once per group
        (not in read-only mode), its steps in the steps pane."""

    def run(self, title: str, op: str, host: str, call: Callable[[OnSteps], Coroutine[Any, Any, OperationResult]],
            *, forget: tuple[str, int] | None = None, gpus: list[int] | None = None,
            req: LaunchRequest | None = None, say: str | None = None) -> None:
        """Run one operation holding ``gpus`` of ``host`` (None: the whole host), its steps drawn in the steps pane;
        refused while another operation holds one of them."""


class Navigation(Protocol):
    """The screens behind keys (``console/ui/screens/workflow.py``)."""

    def sessions(self) -> None: ...
    def full_log(self) -> None: ...
    def orphans(self) -> None: ...
    def events(self) -> None: ...


class AdviceKeys(Protocol):
    """``i`` and ``p`` (``console/ui/screens/advice.py``)."""

    def show(self) -> None: ...
    def report(self) -> None: ...


class Console(Protocol):
    """The app as its parts see it: the console's state, its parts, and the few Textual services they use."""

    @property
    def backend(self) -> Backend: ...

    @property
    def read_only(self) -> bool:
        """Launch, kill, relaunch and edit are refused."""

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def interval(self) -> float:
        """Seconds between samples (what "stale" is measured against)."""

    @property
    def views(self) -> dict[str, HostView]:
        """host → the view shown."""

    @property
    def main(self) -> Panels:
        """The GPU panels' screen."""

    @property
    def log_follower(self) -> Follower: ...

    @property
    def log_listeners(self) -> list[LogListener]:
        """Also told every batch of log lines (the full-screen log)."""

    @property
    def ops(self) -> Actions: ...

    @property
    def workflow(self) -> Navigation: ...

    @property
    def advice_actions(self) -> AdviceKeys: ...

    @property
    def idle_gc(self) -> IdleCollector:
        """The garbage collector's full collections, run while the operator is idle."""

    def apply_views(self, force: bool = False) -> None:
        """Show the views that arrived since the last tick now (``force``: redraw every host)."""

    def age_views(self) -> None:
        """Redraw the GPU panels' sample ages and staleness now (only while they are the screen)."""

    def say(self, message: str, **kw: Any) -> None:
        """A toast whose text is never parsed as markup."""

    # Textual's own (the App's methods)
    def push_screen(self, screen: Screen[Any], callback: Callable[[Any], None] | None = None) -> object: ...

    def install_screen(self, screen: Screen[Any], name: str) -> None: ...

    def is_screen_installed(self, screen: Screen[Any] | str) -> bool: ...

    def get_screen(self, screen: str) -> Screen[Any]: ...

    def run_worker(self, work: Coroutine[Any, Any, Any], *, group: str = ..., exclusive: bool = ...,
                   exit_on_error: bool = ...) -> object: ...

    def call_from_thread(self, callback: Callable[..., Any], *args: Any) -> Any: ...

    def call_after_refresh(self, callback: Callable[..., Any], *args: Any) -> bool: ...

    def batch_update(self) -> AbstractContextManager[None]: ...
