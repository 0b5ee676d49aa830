"""Which session's log the log pane shows, and the lines on their way to it.

The app owns one :class:`LogFollower`. It follows exactly one (host, session) at a time
through the backend, drops lines of any other session, and writes what arrived in one
batch per timer tick. Switching is asynchronous (unfollow the old, follow the new and
show its tail); lines arriving meanwhile wait in the queue.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from console.model import SessionView
from console.ui.format import clean, clock_text, gpu_list, short
from console.ui.widgets.log_pane import LogPane

if TYPE_CHECKING:
    from console.ui.app import MtpConsoleApp


def banner(s: SessionView) -> str:
    """The log pane's banner for session ``s``: which session, its state, where, since when, argv."""
    argv = short(clean(" ".join(s.argv)), 400) or "N/A"
    return (f"session {clean(s.session_id or '', 80)} · {s.state.upper()} · {s.host} · GPUs {gpu_list(s.gpus)}\n"
            f"started {clock_text(s.started_at)}\n$ {argv}")


class LogFollower:
    """Follows one session's log for the log pane (see the module docstring)."""

    def __init__(self, app: MtpConsoleApp) -> None:
        self.app = app
        self.key: tuple[str, str] | None = None
        """(host, session id) shown in the log pane; None when it shows no session."""
        self.busy = False
        """A switch is in progress: queued lines wait until the new tail is shown."""
        self.queue: deque[tuple[str, str, list[str]]] = deque()

    @property
    def pane(self) -> LogPane:
        return self.app.query_one(LogPane)

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
    def show(self, host: str, s: SessionView | None, sid: str | None = None) -> None:
        """Show the log of session ``s`` (or ``sid``) on ``host``; without one, say why there is none."""
        sid = sid or (s.session_id if s else None)
        key = (host, sid) if sid else None
        pane = self.pane
        if key is None:  # nothing to follow here: say why, even if nothing was followed before
            pane.stop(f"foreign server (pid {s.launcher_pid or 'N/A'}): no mtpconsole session log" if s
                      else "no server on this GPU")
        if key == self.key:
            return
        old, self.key = self.key, key
        if key is not None:
            pane.start(host, key[1], banner(s) if s else f"session {clean(key[1], 80)} · {host}")
        self.busy = True
        self.app.run_worker(self._switch(old, key), group="follow", exit_on_error=False)

    def refresh_banner(self, s: SessionView | None) -> None:
        if s is not None and self.key is not None and s.session_id == self.key[1]:
            self.pane.show_banner(banner(s))

    async def _switch(self, old: tuple[str, str] | None, new: tuple[str, str] | None) -> None:
        backend = self.app.backend
        try:
            if old is not None:
                await backend.unfollow_log(*old)
            if new is not None:
                tail = await backend.follow_log(new[0], new[1], 500)
                if self.key == new:
                    self.pane.add_lines(tail)
        except Exception as e:
            self.app.say(f"log: {short(clean(str(e)), 200)}", severity="warning")
        finally:
            self.busy = False
