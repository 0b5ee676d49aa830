"""Launch sessions as the agent reads them from the runs directory (one run directory per session).

Stdlib only, Python >= 3.8; shipped with the agent. Each tick re-reads what may still change
(record, exit, log size, liveness); a session that ended and of which nothing runs is cached as
final and never read again.
"""

import os

from .hostlib import (
    RUN_ACK,
    RUN_EXIT,
    RUN_EXITS,
    RUN_LOG,
    RUN_RECORD,
    RUN_SPEC,
    RUN_STOP_REQUEST,
    SESSION_ID_RE,
    OpError,
    atomic_write_json,
    load_json,
    load_json_lines,
    now,
    proc_alive,
)
from .watch import MAX_EXITS_SHOWN, first_abnormal_exit, merge_exits

RECENT_ENDED_SESSIONS = 32
"""How many ended sessions a sample carries (newest first); older ones stay on disk only."""


class SessionStore(object):
    """The sessions of one runs directory, cached between ticks."""

    def __init__(self, runs_dir, on_alive=None):
        self.runs_dir = runs_dir
        self.on_alive = on_alive  # called (pid, start_ticks, session_id) for a live, unfinished server
        self.cache = {}  # session_id -> dict

    def run_dir(self, session_id):
        return os.path.join(self.runs_dir, session_id)

    def scan(self):
        """Read every run directory (spec/record/exit cached once final)."""
        try:
            names = os.listdir(self.runs_dir)
        except OSError:
            return {}
        out = {}
        for sid in names:
            if sid.startswith("."):
                continue
            d = os.path.join(self.runs_dir, sid)
            c = self.cache.get(sid)
            if c is not None and c.get("final"):
                if c.get("acknowledged_at") is None and os.path.exists(os.path.join(d, RUN_ACK)):
                    ack = load_json(os.path.join(d, RUN_ACK))  # another console acknowledged it
                    c["acknowledged_at"] = ack.get("at") if isinstance(ack, dict) else None
                out[sid] = c  # ended, and nothing of it runs: its files no longer change (but ack.json)
                continue
            if c is None:
                if not os.path.isdir(d):
                    continue
                c = {"session_id": sid, "run_dir": d, "spec": None, "record": None, "exit": None}
            if c["spec"] is None:
                c["spec"] = load_json(os.path.join(d, RUN_SPEC))
            if c["record"] is None:
                c["record"] = load_json(os.path.join(d, RUN_RECORD))
            if c["exit"] is None:
                c["exit"] = load_json(os.path.join(d, RUN_EXIT))
            ack = load_json(os.path.join(d, RUN_ACK))
            c["acknowledged_at"] = ack.get("at") if isinstance(ack, dict) else None
            try:
                c["log_size"] = os.stat(os.path.join(d, RUN_LOG)).st_size
            except OSError:
                c["log_size"] = 0
            c["stop_requested"] = os.path.exists(os.path.join(d, RUN_STOP_REQUEST))
            exits = merge_exits(load_json_lines(os.path.join(d, RUN_EXITS)))
            c["first_abnormal_exit"] = first_abnormal_exit(exits)
            c["exits"] = exits[:MAX_EXITS_SHOWN]
            rec = c["record"] or {}
            c["server_alive"] = bool(rec) and proc_alive(rec.get("pid", -1), rec.get("start_ticks"))
            c["supervisor_alive"] = bool(rec) and proc_alive(rec.get("supervisor_pid", -1),
                                                              rec.get("supervisor_start_ticks"))
            if rec and c["exit"] is None and c["server_alive"] and self.on_alive is not None:
                self.on_alive(rec["pid"], rec.get("start_ticks"), sid)
            c["final"] = c["exit"] is not None and not c["server_alive"] and not c["supervisor_alive"]
            out[sid] = c
        self.cache = dict((k, v) for k, v in self.cache.items() if k in out)
        self.cache.update(out)
        return out

    def acknowledge(self, session_id, by=None):
        """Record that an operator acknowledged the ended session ``session_id`` (``ack.json``).

        Only an ended session can be acknowledged (a live one is no failure to dismiss); a second
        acknowledgement keeps the first one's time. Returns the session as scanned.
        """
        if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
            raise OpError("bad session id %r" % (session_id,))
        d = self.run_dir(session_id)
        if not os.path.isdir(d):
            raise OpError("no session %s in %s" % (session_id, self.runs_dir))
        self.forget(session_id)
        cur = self.scan().get(session_id) or {}
        ended = cur.get("exit") or (cur.get("record") and not cur.get("server_alive")
                                    and not cur.get("supervisor_alive"))
        if not ended:
            raise OpError("session %s has not ended: nothing to acknowledge (kill it first)" % session_id)
        path = os.path.join(d, RUN_ACK)
        if load_json(path) is None:
            atomic_write_json(path, {"at": now(), "by": str(by or "")[:200]})
        self.forget(session_id)
        return self.scan().get(session_id)

    def forget(self, session_id):
        self.cache.pop(session_id, None)

    def set_exit(self, session_id, exit_record):
        c = self.cache.get(session_id)
        if c is not None:
            c["exit"] = exit_record

    @staticmethod
    def visible(sessions):
        """Live sessions and the most recent ended ones, by session id."""
        live = [s for s in sessions.values() if not s.get("exit")]
        ended = sorted((s for s in sessions.values() if s.get("exit")),
                       key=lambda s: s["session_id"], reverse=True)[:RECENT_ENDED_SESSIONS]
        return sorted(live + ended, key=lambda s: s["session_id"])

    def live(self):
        """Sessions whose server (or supervisor) may still hold a GPU or a port."""
        out = []
        for s in self.scan().values():
            if s.get("exit"):
                continue
            if s.get("record") and not (s.get("server_alive") or s.get("supervisor_alive")):
                continue
            out.append(s)
        return out
