"""Launch sessions as the agent reads them from the runs directory (one run directory per session).

Stdlib only, Python >= 3.8; shipped with the agent. Each tick re-reads what may still change
(record, exit, log size, liveness); a session that ended and of which nothing runs is cached as
final and never read again. Every file is read through ``rundir`` (bounded, typed, never following a
link or blocking on a FIFO): a bad run directory is reported ``broken`` with its reason, alone; a
record whose processes are not confirmed (pid, start time, boot id, the session's mark) is ``stale``.

A run directory without a record (nor an exit) is a launch under way while its supervisor runs, this agent is
spawning it, or another console holds the runs directory's launch lock, for at most ``RECORD_TIMEOUT_S``;
otherwise (a full disk, an agent killed right after ``mkdir``) it is *broken*: no record ever will come, it
holds no GPU or port, and the ``prune`` op removes it. A run directory this user does not own (or that others
may write to) is another user's, *untrusted*: listed as such, never read, never a session of this console.
"""

import fcntl
import math
import os
import stat

from .hostlib import (
    RECORD_TIMEOUT_S,
    RUN_ACK,
    RUN_EXIT,
    RUN_EXITS,
    RUN_LOG,
    RUN_RECORD,
    RUN_SPEC,
    RUNS_LOCK,
    SESSION_ID_RE,
    OpError,
    atomic_write_json,
    boot_id,
    load_json,
    load_json_lines,
    now,
    user_name,
)
from .rundir import (
    EXIT_FIELDS,
    EXIT_REQUIRED,
    MAX_SPEC_BYTES,
    RECORD_FIELDS,
    RECORD_REQUIRED,
    SPEC_FIELDS,
    SPEC_REQUIRED,
    Broken,
    check_fields,
    confirm_record,
    live_supervisors,
    load_checked,
    load_file,
    session_dir_problem,
)
from .watch import MAX_EXITS_SHOWN, first_abnormal_exit, merge_exits, stop_requested

RECENT_ENDED_SESSIONS = 32
"""How many ended sessions a sample carries (newest first); older ones stay on disk only."""


class SessionStore(object):
    """The sessions of one runs directory, cached between ticks."""

    def __init__(self, runs_dir, on_alive=None, own=True):
        self.runs_dir = runs_dir
        self.own = own
        """This agent's runs directory: another user's run directory in it is untrusted, never read. False for
        another runs directory looked up for evidence (``otherruns``): read, with its owner for the console to weigh."""
        self.on_alive = on_alive  # called (pid, start_ticks, session_id) for a live, unfinished server
        self.cache = {}  # session_id -> dict
        self.boot = boot_id()
        self.uid = os.getuid()
        self.spawning = set()
        """Session ids this agent's launch is creating now (run directory made, record not yet written)."""
        self.lock_held = False
        """True while this agent holds the runs directory's launch lock (then no other launch is under way)."""

    def run_dir(self, session_id):
        return os.path.join(self.runs_dir, session_id)

    def scan(self, only=None):
        """Read every run directory (spec/record/exit cached once final); with ``only``, just those session ids."""
        try:
            names = list(only) if only is not None else os.listdir(self.runs_dir)
        except OSError:
            return {}
        out = {}
        for sid in names:
            if session_dir_problem(self.runs_dir, sid):
                continue  # not a session (dot files, other names), or a symlink/file never followed
            d = os.path.join(self.runs_dir, sid)
            foreign = self._foreign(d) if self.own else None
            if foreign is not None:  # another user's: never read, never ours
                out[sid] = _broken_entry(sid, d, foreign, untrusted=True, owner_uid=_owner_uid(d))
                continue
            c = self.cache.get(sid)
            if c is not None and c.get("final"):
                if c.get("acknowledged_at") is None and os.path.lexists(os.path.join(d, RUN_ACK)):
                    c["acknowledged_at"] = self._ack(d)  # another console acknowledged it
                out[sid] = c  # ended, and nothing of it runs: its files no longer change (but ack.json)
                continue
            if c is None or c.get("broken"):  # read afresh: a broken one may have been mended
                c = {"session_id": sid, "run_dir": d, "spec": None, "record": None, "exit": None,
                     "owner_uid": _owner_uid(d)}
            try:
                self._read(c, d, sid)
            except Broken as e:
                c = _broken_entry(sid, d, str(e), owner_uid=c.get("owner_uid"))
            out[sid] = c
        self._judge_unrecorded(out)
        if only is None:
            self.cache = dict((k, v) for k, v in self.cache.items() if k in out)
        self.cache.update(out)
        return out

    @staticmethod
    def _ack(d):
        try:
            ack = load_file(os.path.join(d, RUN_ACK))
        except Broken:
            return None
        at = ack.get("at") if isinstance(ack, dict) else None
        return at if isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at) else None

    def _foreign(self, d):
        """Why run directory ``d`` is another user's (not owned by this agent's user, or writable by others), or
        None when it is ours."""
        try:
            st = os.lstat(d)
        except OSError:
            return None  # gone meanwhile: nothing to read either
        if st.st_uid != self.uid:
            return "owned by %s (uid %d), not by this console's user %s (uid %d): untrusted, never read" % (
                user_name(st.st_uid), st.st_uid, user_name(self.uid), self.uid)
        if st.st_mode & 0o022:
            return "writable by other users (mode %04o): untrusted, never read" % (
                stat.S_IMODE(st.st_mode))
        return None

    def _judge_unrecorded(self, out):
        """Each run directory of ``out`` with neither record nor exit: a launch under way (left as it is:
        LAUNCHING), or one that never got its server recorded, replaced by a broken entry saying why."""
        todo = [s for s in out.values() if not s.get("broken") and s.get("record") is None
                and s.get("exit") is None and s["session_id"] not in self.spawning]
        if not todo:
            return
        t = now()
        supervisors = live_supervisors([s["run_dir"] for s in todo], self.uid)
        busy = None
        for s in todo:
            d, sid = s["run_dir"], s["session_id"]
            sup = supervisors.get(d)
            try:
                age = t - os.lstat(d).st_mtime
            except OSError:
                continue
            if age > RECORD_TIMEOUT_S:
                why = "no record.json %d s after the launch%s" % (age, (
                    ": its supervisor (pid %s) runs but never recorded a server" % ",".join(map(str, sup))) if sup
                    else " and its supervisor is gone")
            elif sup:
                continue  # its supervisor is starting the server
            else:
                if busy is None:  # another console's launch may be making this one (under the lock, before its supervisor)
                    busy = not self.lock_held and _lock_busy(self.runs_dir)
                if busy:
                    continue
                why = "no record.json: the launch never recorded a server and its supervisor is gone"
            spec = s.get("spec")
            if spec:
                why += " (spec.json: GPU %s, port %s)" % (",".join(map(str, spec.get("gpus") or [])) or "-",
                                                         spec.get("port") if spec.get("port") is not None else "-")
            else:
                why += " (no spec.json either: the launch stopped before it was written)"
            out[sid] = _broken_entry(sid, d, why, owner_uid=s.get("owner_uid"), final=not sup)

    def _read(self, c, d, sid):
        """(Re-)read what may have changed in run directory ``d``; Broken when a file cannot be trusted."""
        if c["spec"] is None:
            c["spec"] = load_checked(os.path.join(d, RUN_SPEC), SPEC_FIELDS, SPEC_REQUIRED, MAX_SPEC_BYTES)
        if c["record"] is None:
            c["record"] = load_checked(os.path.join(d, RUN_RECORD), RECORD_FIELDS, RECORD_REQUIRED)
        if c["exit"] is None:
            c["exit"] = load_checked(os.path.join(d, RUN_EXIT), EXIT_FIELDS, EXIT_REQUIRED)
        c["acknowledged_at"] = self._ack(d)
        try:
            st = os.lstat(os.path.join(d, RUN_LOG))
            c["log_size"] = st.st_size if stat.S_ISREG(st.st_mode) else 0
        except OSError:
            c["log_size"] = 0
        c["stop_requested"] = stop_requested(d)  # a zero-byte or torn file is none (see watch.stop_requested)
        exits = merge_exits([e for e in load_json_lines(os.path.join(d, RUN_EXITS)) if _exit_line_ok(e)])
        c["first_abnormal_exit"] = first_abnormal_exit(exits)
        c["exits"] = exits[:MAX_EXITS_SHOWN]
        rec = c["record"] or {}
        server, supervisor, stale = confirm_record(rec, d, sid, self.boot)
        c["server_alive"], c["supervisor_alive"] = server, supervisor
        c["record_stale"] = stale if c["exit"] is None else None
        if rec and c["exit"] is None and server and self.on_alive is not None:
            self.on_alive(rec["pid"], rec.get("start_ticks"), sid)
        c["final"] = (c["exit"] is not None or stale is not None) and not server and not supervisor

    def acknowledge(self, session_id, by=None):
        """Record that an operator acknowledged the ended session ``session_id`` (``ack.json``).

        Only an ended session can be acknowledged (a live one is no failure to dismiss); a second
        acknowledgement keeps the first one's time. Returns the session as scanned.
        """
        if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
            raise OpError("bad session id %r" % (session_id,), "bad_request")
        d = self.run_dir(session_id)
        if not os.path.isdir(d):
            raise OpError("no session %s in %s" % (session_id, self.runs_dir), "not_found")
        self.forget(session_id)
        cur = self.scan().get(session_id) or {}
        if cur.get("broken"):
            raise OpError("session %s is %s (%s): nothing to acknowledge%s" % (
                session_id, "not this console's" if cur.get("untrusted") else "broken", cur["broken"],
                "" if cur.get("untrusted") else " ('mtpconsole sessions --prune %s' removes it)" % session_id),
                "refused")
        ended = cur.get("exit") or (cur.get("record") and not cur.get("server_alive")
                                    and not cur.get("supervisor_alive"))
        if not ended:
            raise OpError("session %s has not ended: nothing to acknowledge (kill it first)" % session_id, "not_ended")
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
    def visible(sessions, show_all=False):
        """Live sessions and the most recent ended ones (every one with ``show_all``), by session id; other
        users' run directories count with the ended ones (a flood of them never fills a sample)."""
        live = [s for s in sessions.values() if not s.get("exit") and not s.get("untrusted")]
        ended = sorted((s for s in sessions.values() if s.get("exit") or s.get("untrusted")),
                       key=lambda s: s["session_id"], reverse=True)
        if not show_all:
            ended = ended[:RECENT_ENDED_SESSIONS]
        return sorted(live + ended, key=lambda s: s["session_id"])

    def live(self):
        """Sessions whose server (or supervisor) may still hold a GPU or a port (never a broken run directory,
        nor another user's: neither holds anything of this console)."""
        out = []
        for s in self.scan().values():
            if s.get("exit") or s.get("broken"):
                continue
            if s.get("record") and not (s.get("server_alive") or s.get("supervisor_alive")):
                continue
            out.append(s)
        return out


def _broken_entry(sid, d, why, untrusted=False, owner_uid=None, final=False):
    """A run directory listed with why it cannot be used (``broken``): none of its files are used."""
    out = {"session_id": sid, "run_dir": d, "spec": None, "record": None, "exit": None, "broken": why,
           "owner_uid": owner_uid, "server_alive": False, "supervisor_alive": False, "log_size": 0,
           "stop_requested": False, "exits": [], "first_abnormal_exit": None, "final": final}
    if untrusted:
        out["untrusted"] = True
    return out


def _lock_busy(runs_dir):
    """True when some process holds the runs directory's launch lock (a launch is under way there)."""
    try:
        fd = os.open(os.path.join(runs_dir, RUNS_LOCK), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False  # no lock file: no launch ever ran here
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _owner_uid(d):
    """The uid that owns run directory ``d`` (never through a link), None when it cannot be read."""
    try:
        return os.lstat(d).st_uid
    except OSError:
        return None


def _exit_line_ok(e):
    """An exits.jsonl line whose fields have the types the console expects (others are skipped)."""
    def opt_int(v):
        return v is None or (isinstance(v, int) and not isinstance(v, bool))

    def opt_num(v):
        return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))

    try:
        check_fields("exits.jsonl", e, {"pid": opt_int, "start_ticks": opt_int, "at": opt_num, "exit_code": opt_int,
                                        "signal": opt_int, "oom_kill_delta": opt_int}, ("pid",))
    except Broken:
        return False
    return True
