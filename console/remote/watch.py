"""Process exit watches for the agent: pidfd where the kernel has one, else polling /proc.

Stdlib only, Python >= 3.8; shipped with the agent. An ended process is pushed at once as an
``exit`` event; a session's server ending also waits (briefly) for its ``exit.json`` and pushes
``session_ended``.
"""

import os
import selectors

from .hostlib import RUN_EXIT, load_json, now, proc_alive

EXIT_JSON_WAIT_S = 5.0
"""How long after a session's server ended the agent waits for the supervisor's exit.json."""


class ExitWatcher(object):
    """Watches (pid, start_ticks) identities; ``sel`` is the agent loop's selector."""

    def __init__(self, sel, send, runs_dir, on_session_ended=None):
        self.sel = sel
        self.send = send
        self.runs_dir = runs_dir
        self.on_session_ended = on_session_ended  # called (session_id, exit record or None)
        self.watches = {}  # (pid, start_ticks) -> {"fd": pidfd or None, "session_id": ...}
        self.pending = {}  # session_id -> deadline to wait for exit.json

    def polling(self):
        """True while some watch has no pidfd (the loop must poll every 50 ms)."""
        return any(w["fd"] is None for w in self.watches.values())

    def ensure(self, pid, start_ticks, session_id=None):
        """Watch a process (idempotent); one already gone is reported at once."""
        key = (pid, start_ticks)
        if key in self.watches:
            return
        fd = None
        if hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                fd = None
        if start_ticks is not None and not proc_alive(pid, start_ticks):
            if fd is not None:
                os.close(fd)
            self.watches[key] = {"fd": None, "session_id": session_id}
            self.on_exit(key)
            return
        self.watches[key] = {"fd": fd, "session_id": session_id}
        if fd is not None:
            self.sel.register(fd, selectors.EVENT_READ, ("pidfd", key))

    def on_exit(self, key):
        w = self.watches.pop(key, None)
        if w is None:
            return
        if w["fd"] is not None:
            try:
                self.sel.unregister(w["fd"])
            except (KeyError, ValueError):
                pass
            os.close(w["fd"])
        ev = {"type": "event", "kind": "exit", "pid": key[0], "start_ticks": key[1], "at": now()}
        if w["session_id"]:
            ev["session_id"] = w["session_id"]
            self.pending[w["session_id"]] = now() + EXIT_JSON_WAIT_S
        self.send(ev)

    def poll(self):
        """Report watched processes gone (those without a pidfd)."""
        for key, w in list(self.watches.items()):
            if w["fd"] is None and not proc_alive(key[0], key[1]):
                self.on_exit(key)

    def poll_pending(self):
        """Push ``session_ended`` once a session's exit.json appears (or the wait ran out)."""
        for sid, deadline in list(self.pending.items()):
            ex = load_json(os.path.join(self.runs_dir, sid, RUN_EXIT))
            if ex is not None or now() > deadline:
                del self.pending[sid]
                self.send({"type": "event", "kind": "session_ended", "session_id": sid, "exit": ex})
                if self.on_session_ended is not None:
                    self.on_session_ended(sid, ex)
