"""Which session's log the log pane shows, and the lines on their way to it.

The app owns one :class:`LogFollower`. It shows the *current session* of the selected GPU
panel (as the HostView says, see ``console/core/current.py``) and nothing else: when that
changes (a launch just sent, a relaunch from another console, a kill) the pane switches at
once, to an empty log saying "waiting for output" if need be. It follows exactly one
(host, session) at a time through the backend, drops lines of any other session, and
writes what arrived in one batch per timer tick. Switching is asynchronous (unfollow the
old, follow the new and show its tail); lines arriving meanwhile wait in the queue.
"""

from __future__ import annotations

from collections import deque

from console.core.text import launch_progress
from console.model import SessionView
from console.ui.format import clean, clock_text, gpu_list, hms, short
from console.ui.protocols import Console
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.log_pane import LogPane


def banner(s: SessionView, whole: bool = False) -> str:
    """The log pane's banner for session ``s``: which session, its state, where, since when, argv (its first 400
    characters; ``whole``: all of it, for the full-screen log, which wraps it)."""
    argv = (clean(" ".join(s.argv)) if whole else short(clean(" ".join(s.argv)), 400)) or "N/A"
    state = s.state.upper()
    if s.state == "failed":
        state += f": {s.cause or 'unknown'}"
    elif s.state == "stopped":
        state += f" by {s.stopped_by or 'an operator'} at {hms(s.ended_at)}"
    elif s.state == "launching":
        state += f" {launch_progress(s.step)}"
    when = "launch sent" if s.pending else "started"
    return (f"session {clean(s.session_id or '', 80)} · {state} · {s.host} · GPUs {gpu_list(s.gpus)}\n"
            f"{when} {clock_text(s.started_at)}\n$ {argv}")


class LogFollower:
    """Follows one session's log for the log pane (see the module docstring)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.key: tuple[str, str] | None = None
        """(host, session id) shown in the log pane; None when it shows no session."""
        self.attached = False
        """The backend follows ``key`` (False while a launch just sent has no log on the host yet)."""
        self.message: str | None = None
        """What the pane says when it shows no session."""
        self.switching = 0
        self.queue: deque[tuple[str, str, list[str]]] = deque()

    @property
    def pane(self) -> LogPane:
        return self.console.main.log_pane

    # ---- lines in (any thread) and out (timer)
    def on_log(self, host: str, session_id: str, lines: list[str]) -> None:
        self.queue.append((host, session_id, list(lines)))

    def flush(self) -> None:
        """Write the queued lines of the followed session in one batch; drop every other session's."""
        if self.busy or not self.queue:
            return
        batch: list[str] = []
        while self.queue:
            host, sid, lines = self.queue.popleft()
            if (host, sid) == self.key:
                batch.extend(lines)
        if batch:
            self.pane.add_lines(batch)

    # ---- switching
    def sync(self, panel: GpuPanel | None) -> None:
        """Show the current session of ``panel`` (the selected one): called after every view applied
        and every selection change, so the log pane never shows another session than the panel."""
        if panel is None or not panel.is_attached:
            return
        s = panel.session
        if s is None or not s.session_id:
            self._show_none(f"foreign server (pid {s.launcher_pid or 'N/A'}) on GPU {panel.index}: "
                            "z shows its output (no session log)" if s else f"no server on {panel.host} GPU {panel.index}")
            return
        key = (panel.host, s.session_id)
        if key != self.key:
            old, self.key, self.message = self.key, key, None
            self.attached = not s.pending
            self.pane.start(key[0], key[1], banner(s))
            self._start_switch(old, key if self.attached else None)
            return
        self.pane.show_banner(banner(s))
        if not self.attached and not s.pending:  # the host reports it now: its log exists
            self.attached = True
            self._start_switch(None, key)

    def _show_none(self, message: str) -> None:
        old = self.key
        if old is None and message == self.message:
            return
        self.key, self.message, self.attached = None, message, False
        self.pane.stop(message)
        if old is not None:
            self._start_switch(old, None)

    def _start_switch(self, old: tuple[str, str] | None, new: tuple[str, str] | None) -> None:
        if old is None and new is None:
            return
        self.switching += 1
        self.console.run_worker(self._switch(old, new), group="follow", exit_on_error=False)

    @property
    def busy(self) -> bool:
        """A switch is in progress: queued lines wait until the new tail is shown."""
        return self.switching > 0

    async def _switch(self, old: tuple[str, str] | None, new: tuple[str, str] | None) -> None:
        backend = self.console.backend
        try:
            if old is not None:
                await backend.unfollow_log(*old)
            if new is not None:
                tail = await backend.follow_log(new[0], new[1], 500)
                if self.key == new:
                    self.pane.add_lines(tail)
        except Exception as e:
            self.console.say(f"log: {short(clean(str(e)), 200)}", severity="warning")
        finally:
            self.switching -= 1
