"""Process exit watches for the agent: pidfd where the kernel has one, else polling /proc.

Stdlib only, Python >= 3.8; shipped with the agent. An ended process is pushed at once as an
``exit`` event. Every process of a launch session is watched, and its end is appended to the
session's ``exits.jsonl`` (see :func:`exit_entry`): the console tells from it which process died
first. A session's server ending also waits (briefly) for its ``exit.json`` and pushes
``session_ended``.

The exit code or signal of a process that is not our child is read from its zombie
(``/proc/<pid>/stat`` field 52) in the instant between its death, which the pidfd reports, and its
parent reaping it; when the parent was faster the process is recorded as ``gone``.
"""

import os
import selectors
import signal
from typing import Any, Dict, List, Optional, Tuple

from .hostlib import (
    RUN_EXIT,
    RUN_EXITS,
    RUN_STOP_REQUEST,
    append_json_line,
    decode_wait_status,
    load_json,
    now,
    proc_cmdline,
    proc_environ,
    proc_stat,
    read_oom_kill,
)
from .procscan import RESOURCE_TRACKER, SPAWN_CHILD, classify_title, title_ranks
from .rundir import Broken, load_file

MAX_EXITS_SHOWN = 64
"""How many process exits of one session a sample carries (the earliest; first_abnormal_exit is exact)."""
EXIT_JSON_WAIT_S = 5.0
"""How long after a session's server ended the agent waits for the supervisor's exit.json."""
MAX_SERVERS_KEPT = 256
"""How many sessions' server identities the exit watcher keeps (to tell whether a member died before it)."""
STOP_SIGNAL = signal.SIGWINCH
"""What a kill sends a session's (confirmed) supervisor before it signals the server: "an operator asked this
session to stop". The supervisor keeps it in memory for its exit.json, so the stop is known even when
``stop-request.json`` cannot be written (a full disk). A daemon has no terminal, so no real window-size change
ever reaches it, and the default action is to ignore it: an older supervisor without the handler is unharmed."""


def stop_requested(run_dir):
    """True when ``run_dir`` holds a whole stop request: ``stop-request.json`` a regular file holding a JSON object.
    A zero-byte or torn one (a kill on a full disk, an agent killed mid-write) or anything planted in its place
    is no stop request."""
    try:
        return isinstance(load_file(os.path.join(run_dir, RUN_STOP_REQUEST)), dict)
    except (Broken, OSError):
        return False


HELPER_ROLES = (None, "other", "resource_tracker")
"""Roles of processes that serve no request (multiprocessing's resource tracker...): named in a cause only when
one of them truly died first."""
MAX_FOLLOWERS = 8
"""How many of the ends that followed the first abnormal one it carries (``followers``)."""
TEARDOWN_S = 0.25
"""Ends seen this close to the first one are one teardown, whose order the sightings cannot tell."""
SENT_SIGNALS = (1, 2, 3, 9, 15)
"""SIGHUP, SIGINT, SIGQUIT, SIGKILL, SIGTERM: signals someone sends (a crash raises SIGSEGV, SIGABRT, SIGBUS...)."""


def alive(pid, start_ticks=None):
    """True while process ``pid`` (the one started at ``start_ticks`` when given) runs: False once it is a
    zombie, gone or its pid reused; None when ``pid`` is None."""
    if pid is None:
        return None
    st = proc_stat(pid)
    return st is not None and st["state"] not in ("Z", "X") and (start_ticks is None or st["start_ticks"] == start_ticks)


def merge_exits(lines):
    """One entry per process (pid, start time) from exits.jsonl, in the order the processes ended.

    The supervisor knows the exit code of what it reaped (the server, orphans) and which leftovers it
    killed itself (``killed_by_supervisor``); the agent knows role, GPU and the OOM counter of every
    member (and the code when it caught the zombie). Several writers may have recorded the same exit:
    the first sighting's time is kept, and a specific role beats ``other``.

    ``launcher_alive`` is what the writer saw when it noticed the end: True (any writer) proves the
    process ended before the session's server (its launcher); False means the launcher had ended by
    then, so the launcher's end was seen no later than that sighting (its ``at`` is moved back to it)
    and it comes first on a tie. Lines of older writers carry neither field (None, False).
    """
    merged: Dict[Tuple[int, Optional[int]], Dict[str, Any]] = {}
    for e in lines:
        if not isinstance(e.get("pid"), int):
            continue
        key = (e["pid"], e.get("start_ticks"))
        m = merged.get(key)
        if m is None:
            merged[key] = dict(e)
            continue
        for k, v in e.items():
            if m.get(k) is None and v is not None:
                m[k] = v
        if m.get("how") == "gone" and e.get("how") in ("signal", "exited"):
            m["how"], m["exit_code"], m["signal"] = e["how"], e.get("exit_code"), e.get("signal")
        if _role_rank(e.get("role")) > _role_rank(m.get("role")):
            m["role"] = e["role"]
        for flag in ("killed_by_supervisor", "server"):
            m[flag] = bool(m.get(flag) or e.get(flag))
        if e.get("launcher_alive") is True:
            m["launcher_alive"] = True
        if m.get("source") != e.get("source"):
            m["source"] = "agent+supervisor"
        m["at"] = min(m.get("at") or e.get("at") or 0, e.get("at") or m.get("at") or 0)
    exits = list(merged.values())
    server = server_exit(exits)
    if server is not None:
        seen_dead = [e["at"] for e in exits if e is not server and e.get("launcher_alive") is False and e.get("at")]
        if seen_dead and (server.get("at") is None or min(seen_dead) < server["at"]):
            server["at"] = min(seen_dead)
    return sorted(exits, key=lambda e: (e.get("at") or 0, 0 if e is server else 1))


def _role_rank(role):
    """How specific a role is: a server role beats the resource tracker, which beats ``other``, which beats none."""
    return HELPER_ROLES.index(role) if role in HELPER_ROLES else len(HELPER_ROLES)


def server_exit(exits):
    """The end of the session's server (its launcher) among merged exits, None when none is recorded."""
    marked = [e for e in exits if e.get("server")]
    if marked:
        return marked[0]
    launchers = [e for e in exits if e.get("role") == "launcher"]
    return launchers[0] if len(launchers) == 1 else None


def is_abnormal(e):
    """A process end that is a failure: a signal, a non-zero exit code, or the OOM killer firing meanwhile,
    unless the operator had asked the session to stop."""
    if e.get("after_stop_request"):
        return False
    return bool(e.get("signal")) or e.get("exit_code") not in (None, 0) or (e.get("oom_kill_delta") or 0) > 0


def first_abnormal_exit(exits):
    """The first death among a session's merged exits (None when there is none), with the ends that followed it.

    One rule, on what was seen (see :func:`merge_exits` for the order):

    - a leftover the supervisor killed is never first, nor a process seen ending only after the launcher had
      ended (its parent's death explains it: SIGKILL from ``PR_SET_PDEATHSIG``, the group kill);
    - a helper (multiprocessing's resource tracker) ends no server: it is first only when no server process
      ended abnormally and the server's own end is recorded;
    - ends seen within ``TEARDOWN_S`` of the earliest are one teardown (a launcher killing its tree takes
      milliseconds, an order no sighting can resolve): of those proven to have ended while the launcher ran,
      else of all of them, the first is one that ended by itself (an exit code, a crash signal), then a
      rank or the launcher, then another server process (the detokenizer), each group in the order seen.

    ``followers``: the server processes that ended from then on (helpers only when the supervisor killed them),
    at most ``MAX_FOLLOWERS`` (``followers_left_out`` counts the rest).
    """
    server = server_exit(exits)
    cands = [i for i, e in enumerate(exits) if is_abnormal(e) and not e.get("killed_by_supervisor")
             and (e is server or e.get("launcher_alive") is not False)]
    if not cands and server is None:  # the launcher's end is not recorded: nothing to put before it
        cands = [i for i, e in enumerate(exits) if is_abnormal(e) and not e.get("killed_by_supervisor")]
    serving = [i for i in cands if exits[i].get("role") not in HELPER_ROLES]
    if serving:
        cands = serving
    elif server is None:
        return None  # only helpers ended, and the server has not: nothing ended it
    if not cands:
        return None
    t0 = exits[cands[0]].get("at") or 0
    teardown = [i for i in cands if (exits[i].get("at") or 0) <= t0 + TEARDOWN_S]
    pool = [i for i in teardown if exits[i].get("launcher_alive") is True] or teardown
    first = min(pool, key=lambda i: (_blame_rank(exits[i]), i))
    after = [x for i, x in enumerate(exits) if i >= cands[0] and i != first
             and (x.get("role") not in HELPER_ROLES or x.get("killed_by_supervisor"))]
    return dict(exits[first], followers=[_follower(x) for x in after[:MAX_FOLLOWERS]],
                followers_left_out=max(0, len(after) - MAX_FOLLOWERS))


def _blame_rank(e):
    """0: ended by itself (an exit code, a crash signal); 1: a rank or the launcher; 2: another server process;
    3: a helper."""
    if e.get("exit_code") not in (None, 0) or (e.get("signal") and e["signal"] not in SENT_SIGNALS):
        return 0
    if e.get("server") or e.get("role") == "launcher" or (e.get("role") == "worker" and e.get("tp_rank") is not None
                                                          and "detokenizer" not in (e.get("title") or "")):
        return 1
    return 2 if e.get("role") not in HELPER_ROLES else 3


def _follower(e):
    keep = ("pid", "start_ticks", "at", "exit_code", "signal", "how", "role", "title", "gpus", "tp_rank", "dp_rank",
            "oom_kill_delta", "after_stop_request", "launcher_alive", "killed_by_supervisor", "server", "source")
    return dict((k, e[k]) for k in keep if k in e)


def process_gpus(proc):
    """The GPU indexes a process uses: the driver's attribution, else its TP rank among its visible GPUs."""
    held = sorted(int(k) for k in (proc.get("gpu_mem_mib") or {}))
    if held:
        return held
    visible = [v.strip() for v in (proc.get("cuda_visible_devices") or "").split(",") if v.strip()]
    rank = proc.get("tp_rank")
    if rank is not None and rank < len(visible) and visible[rank].isdigit():
        return [int(visible[rank])]
    if len(visible) == 1 and visible[0].isdigit() and proc.get("role") == "worker":
        return [int(visible[0])]
    return []


def exit_entry(pid, start_ticks, meta, wait_status, at, oom_delta, after_stop, launcher_alive=None,
               server=False):
    """One line of ``exits.jsonl``: who ended, how, when, whether the kernel's OOM killer fired, and whether the
    session's launcher was still running when this end was seen (None for the launcher itself, or unknown)."""
    code, sig = decode_wait_status(wait_status)
    return {
        "pid": pid, "start_ticks": start_ticks, "at": at, "exit_code": code, "signal": sig,
        "how": "signal" if sig else "exited" if code is not None else "gone",
        "role": meta.get("role"), "title": meta.get("title"), "gpus": meta.get("gpus") or [],
        "tp_rank": meta.get("tp_rank"), "dp_rank": meta.get("dp_rank"), "session_id": meta.get("session_id"),
        "oom_kill_delta": oom_delta, "after_stop_request": bool(after_stop), "source": "agent",
        "launcher_alive": launcher_alive, "killed_by_supervisor": False, "server": bool(server),
    }


class ExitWatcher(object):
    """Watches (pid, start_ticks) identities; ``sel`` is the agent loop's selector."""

    def __init__(self, sel, send, runs_dir, on_session_ended=None):
        self.sel = sel
        self.send = send
        self.runs_dir = runs_dir
        self.on_session_ended = on_session_ended  # called (session_id, exit record or None)
        self.watches = {}  # (pid, start_ticks) -> {"fd", "session_id", "ends_session", "meta"}
        self.pending = {}  # session_id -> deadline to wait for exit.json
        self.servers = {}  # session_id -> (pid, start_ticks) of its server (launcher), for launcher_alive
        self.oom_seen = read_oom_kill()  # the OOM kill counter at the last tick

    def polling(self):
        """True while some watch has no pidfd (the loop must poll every 50 ms)."""
        return any(w["fd"] is None for w in self.watches.values())

    def tick(self):
        """Once per sample: remember the OOM kill counter (an exit's delta is taken against it)."""
        self.oom_seen = read_oom_kill()

    def ensure(self, pid, start_ticks, session_id=None, ends_session=True, meta=None):
        """Watch a process (idempotent; ``meta`` refreshed); one already gone is reported at once.

        ``ends_session``: this is the session's server, whose end means the session ended.
        """
        key = (pid, start_ticks)
        w = self.watches.get(key)
        if w is not None:
            if meta:
                w["meta"].update(meta)
            w["session_id"] = w["session_id"] or session_id
            w["ends_session"] = w["ends_session"] or (ends_session and bool(session_id))
            self._note_server(w, key)
            return
        fd = None
        if hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                fd = None
        w = {"fd": fd, "session_id": session_id, "ends_session": ends_session and bool(session_id),
             "meta": dict(meta or {})}
        self.watches[key] = w
        self._note_server(w, key)
        st = proc_stat(pid)
        if start_ticks is not None and (st is None or st["state"] in ("Z", "X") or st["start_ticks"] != start_ticks):
            self.on_exit(key)
            return
        if fd is not None:
            self.sel.register(fd, selectors.EVENT_READ, ("pidfd", key))

    def _note_server(self, w, key):
        if w["ends_session"] and w["session_id"]:
            self.servers.pop(w["session_id"], None)
            self.servers[w["session_id"]] = key
            while len(self.servers) > MAX_SERVERS_KEPT:
                del self.servers[next(iter(self.servers))]

    def on_exit(self, key):
        st = proc_stat(key[0])  # first: the zombie's wait status, before its parent reaps it
        at = now()
        w = self.watches.pop(key, None)
        if w is None:
            return
        if w["fd"] is not None:
            try:
                self.sel.unregister(w["fd"])
            except (KeyError, ValueError):
                pass
            os.close(w["fd"])
        status = None
        if st is not None and st["state"] in ("Z", "X") and (key[1] is None or st["start_ticks"] == key[1]):
            status = st.get("wait_status")
        ev = {"type": "event", "kind": "exit", "pid": key[0], "start_ticks": key[1], "at": at}
        code, sig = decode_wait_status(status)
        ev["exit_code"], ev["signal"] = code, sig
        sid = w["session_id"]
        if sid:
            ev["session_id"] = sid
            server = self.servers.get(sid)
            # after the zombie was read: a launcher still running now ended after this process
            launcher = None if w["ends_session"] or server is None else alive(*server)
            self._record(sid, key, w["meta"], status, at, launcher, w["ends_session"])
            if w["ends_session"]:
                self.pending[sid] = now() + EXIT_JSON_WAIT_S
        self.send(ev)

    def _record(self, sid, key, meta, status, at, launcher_alive=None, server=False):
        """Append the exit to the session's exits.jsonl (never raises: a full disk loses only this line)."""
        run_dir = os.path.join(self.runs_dir, sid)
        if not os.path.isdir(run_dir):
            return
        oom = read_oom_kill()
        delta = None if oom is None or self.oom_seen is None else max(0, oom - self.oom_seen)
        meta = dict(meta, session_id=sid)
        entry = exit_entry(key[0], key[1], meta, status, at, delta, stop_requested(run_dir), launcher_alive, server)
        try:
            append_json_line(os.path.join(run_dir, RUN_EXITS), entry)
        except OSError:
            pass

    def poll(self):
        """Report watched processes gone (those without a pidfd)."""
        for key, w in list(self.watches.items()):
            if w["fd"] is None:
                st = proc_stat(key[0])
                if st is None or st["state"] in ("Z", "X") or (key[1] is not None and st["start_ticks"] != key[1]):
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


class MemberWatch(object):
    """The supervisor's own record of its session's processes, kept whether or not an agent runs.

    ``poll()`` (every ~50 ms) notices a member that ended, reading its wait status from the zombie
    when its parent has not reaped it yet, and appends it to ``exits.jsonl`` like the agent does
    (the console merges both per process). Membership (every descendant of the supervisor except the
    server itself, whose end the supervisor records exactly) and titles are refreshed every
    ``REFRESH_S``, so retitled workers carry their final role and TP rank.
    """

    REFRESH_S = 0.5

    def __init__(self, run_dir, supervisor_pid, server_pid, session_id=None, log=None, stop_asked=None):
        self.log = log  # called with one line per member seen or retitled
        self.stop_asked = stop_asked or stop_requested  # (run_dir) -> whether an operator asked the session to stop
        self.run_dir = run_dir
        self.me = supervisor_pid
        self.server = server_pid
        self.session_id = session_id
        self.members = {}  # pid -> {"start": ticks, "meta": {...}}
        self.next_refresh = 0.0
        self.oom_seen = read_oom_kill()

    def _meta(self, pid, argv, launcher, cvd):
        fw, role = classify_title(argv)
        line = " ".join(argv)
        if role is None:
            role = "launcher" if pid == self.server else "worker" if (launcher and SPAWN_CHILD.search(line)) \
                else "resource_tracker" if RESOURCE_TRACKER.search(line) else None
        dp, tp = title_ranks(argv)
        proc = {"role": role, "tp_rank": tp, "cuda_visible_devices": cvd}
        return {"role": role or "other", "title": (argv or [""])[0][:200], "gpus": process_gpus(proc),
                "tp_rank": tp, "dp_rank": dp}

    def _devices(self, pid, ppid, prev):
        """CUDA_VISIBLE_DEVICES of a member: its own environ's, read before a retitle overwrites it (kept from
        ``prev``), else its parent's, as a spawned child inherits it."""
        env = proc_environ(pid, ("CUDA_VISIBLE_DEVICES",))
        if env is not None:
            return env.get("CUDA_VISIBLE_DEVICES")
        if prev is not None:
            return prev["cvd"]
        parent = self.members.get(ppid)
        if parent is not None:
            return parent["cvd"]
        env = proc_environ(ppid, ("CUDA_VISIBLE_DEVICES",)) or {}
        return env.get("CUDA_VISIBLE_DEVICES")

    def refresh(self):
        """Re-list the members (descendants of the supervisor) and their titles."""
        children: Dict[int, List[int]] = {}
        stats = {}
        try:
            names = os.listdir("/proc")
        except OSError:
            return
        for name in names:
            if name.isdigit():
                st = proc_stat(int(name))
                if st is not None and st["state"] not in ("Z", "X"):
                    stats[int(name)] = st
                    children.setdefault(st["ppid"], []).append(int(name))
        stack = [(p, False) for p in children.get(self.me, [])]
        while stack:
            pid, under_launcher = stack.pop()
            st = stats[pid]
            stack.extend((c, under_launcher or pid == self.server) for c in children.get(pid, []))
            if pid == self.server:
                continue
            m = self.members.get(pid)
            if m is not None and m["start"] != st["start_ticks"]:
                m = None
            argv = proc_cmdline(pid)
            if argv is None:
                continue
            if m is None or m["argv"] != argv:
                cvd = self._devices(pid, st["ppid"], m)
                meta = self._meta(pid, argv, under_launcher, cvd)
                self.members[pid] = {"start": st["start_ticks"], "argv": argv, "meta": meta, "cvd": cvd}
                if self.log is not None:
                    self.log("member %d: %s %s (gpus %s)" % (pid, meta["role"], meta["title"][:80],
                                                             ",".join(map(str, meta["gpus"])) or "-"))
        self.oom_seen = read_oom_kill()

    def poll(self):
        """Record members that ended since the last poll; refresh membership when due."""
        for pid, m in list(self.members.items()):
            st = proc_stat(pid)
            if st is not None and st["start_ticks"] == m["start"] and st["state"] not in ("Z", "X"):
                continue
            status = st.get("wait_status") if st is not None and st["start_ticks"] == m["start"] else None
            launcher = alive(self.server)  # never reaped before the session ends (WNOWAIT): no reused pid
            del self.members[pid]
            oom = read_oom_kill()
            delta = None if oom is None or self.oom_seen is None else max(0, oom - self.oom_seen)
            entry = exit_entry(pid, m["start"], dict(m["meta"], session_id=self.session_id), status, now(), delta,
                               self.stop_asked(self.run_dir), launcher)
            entry["source"] = "supervisor"
            try:
                append_json_line(os.path.join(self.run_dir, RUN_EXITS), entry)
            except OSError:
                pass
        if now() >= self.next_refresh:
            self.next_refresh = now() + self.REFRESH_S
            self.refresh()
